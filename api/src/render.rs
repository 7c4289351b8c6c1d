//! Rendering `spec.template.data` over the decrypted items: every template parsed and run,
//! and their failures gathered into one [`crate::Error::TemplateData`].

use std::collections::BTreeMap;

use k8s_openapi::ByteString;

use crate::template::Template;

/// Renders every entry of `spec.template.data` against the decrypted `items`, as Bitnami
/// does.
///
/// The result maps each key to its rendered bytes, or to `None` for a `null` template,
/// which means "remove the item of this name". Apply it over the decrypted items to get
/// the Secret's data. Every template is tried; the errors of all that fail are returned
/// together (sorted, without duplicates) in [`crate::Error::TemplateData`].
///
/// The controller's verify and rotate endpoints must not call this (nor unseal with
/// [`crate::UnsealOptions::render_template_data`]): `spec.template` is not authenticated,
/// so rendering attacker-chosen templates there would be a decryption oracle.
pub fn render_template_data(
    templates: &BTreeMap<String, Option<String>>,
    items: &BTreeMap<String, ByteString>,
) -> crate::Result<BTreeMap<String, Option<Vec<u8>>>> {
    let mut rendered = BTreeMap::new();
    let mut errors = Vec::new();
    for (key, source) in templates {
        let Some(source) = source else {
            rendered.insert(key.clone(), None);
            continue;
        };
        match Template::parse(key, source).and_then(|t| t.render(items)) {
            Ok(bytes) => {
                rendered.insert(key.clone(), Some(bytes));
            }
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(rendered)
    } else {
        errors.sort();
        errors.dedup();
        Err(crate::Error::TemplateData { errors })
    }
}
