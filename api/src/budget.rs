//! The YAML parser's budgets (serde-saphyr's [`Budget`]) and their breaches in words.
//!
//! Input from the network (the controller's request bodies, [`crate::request`]) is parsed
//! under small limits sized for one SealedSecret. Files the user names are trusted more and
//! may be large (a GitOps repository's file of thousands of SealedSecrets): [`local_files`]
//! raises the size limits far above serde-saphyr's defaults, and keeps its limits on aliases
//! and anchors, which are how a small file explodes ("billion laughs").
//!
//! serde-saphyr prints a breach in `Debug` form (`budget breached: Documents { documents:
//! 1025 }`); [`describe`] and [`message`] say it as a sentence that names the limit.

use serde_saphyr::Budget;
use serde_saphyr::budget::BudgetBreach;

/// Most YAML documents read from one local file.
pub const LOCAL_MAX_DOCUMENTS: usize = 1_000_000;
/// Most nodes (mappings, sequences and scalars) read from one local file: about 100,000
/// SealedSecrets of 100 items.
pub const LOCAL_MAX_NODES: usize = 50_000_000;
/// Most parser events read from one local file (each node is one or two events).
pub const LOCAL_MAX_EVENTS: usize = 4 * LOCAL_MAX_NODES;
/// Most bytes of scalar text read from one local file.
pub const LOCAL_MAX_SCALAR_BYTES: usize = 4 << 30;

/// The budget for files the user names: serde-saphyr's defaults (aliases, anchors, merge keys
/// and depth included) with far larger size limits.
#[must_use]
pub fn local_files() -> Budget {
    let mut budget = Budget::default();
    budget.max_documents = LOCAL_MAX_DOCUMENTS;
    budget.max_nodes = LOCAL_MAX_NODES;
    budget.max_events = LOCAL_MAX_EVENTS;
    budget.max_total_scalar_bytes = LOCAL_MAX_SCALAR_BYTES;
    budget.max_reader_input_bytes = None;
    budget
}

/// What `breach` of `budget` means, as a phrase that names the limit ("more than 1024 YAML
/// documents").
#[must_use]
pub fn describe(breach: &BudgetBreach, budget: &Budget) -> String {
    match breach {
        BudgetBreach::Events { .. } => format!("more than {} parser events", budget.max_events),
        BudgetBreach::Aliases { .. } => {
            format!("more than {} aliases (*name)", budget.max_aliases)
        }
        BudgetBreach::Anchors { .. } => {
            format!("more than {} anchors (&name)", budget.max_anchors)
        }
        BudgetBreach::Depth { .. } => format!("nested deeper than {} levels", budget.max_depth),
        BudgetBreach::InclusionDepth { .. } => format!(
            "includes nested deeper than {} levels",
            budget.max_inclusion_depth
        ),
        BudgetBreach::Documents { .. } => {
            format!("more than {} YAML documents", budget.max_documents)
        }
        BudgetBreach::Nodes { .. } => format!(
            "more than {} nodes (mappings, sequences and scalars)",
            budget.max_nodes
        ),
        BudgetBreach::ScalarBytes { .. } => format!(
            "more than {} bytes of scalar text",
            budget.max_total_scalar_bytes
        ),
        BudgetBreach::MergeKeys { .. } => {
            format!("more than {} merge keys (<<)", budget.max_merge_keys)
        }
        BudgetBreach::AliasAnchorRatio { aliases, anchors } => format!(
            "more than {} aliases per anchor ({aliases} aliases, {anchors} {}): aliases that \
             expand that often are how a small file explodes",
            budget.alias_anchor_ratio_multiplier,
            if *anchors == 1 { "anchor" } else { "anchors" }
        ),
        BudgetBreach::SequenceUnbalanced => {
            "a mapping or sequence closed that was never opened (truncated or malformed input)"
                .to_owned()
        }
        BudgetBreach::InputBytes { .. } => match budget.max_reader_input_bytes {
            Some(max) => format!("more than {max} bytes of input"),
            None => "more input than the parser reads".to_owned(),
        },
        BudgetBreach::RecordedAnchorEvents { .. } | BudgetBreach::RecordedAnchorBytes { .. } => {
            "anchored content replayed more often than the parser allows".to_owned()
        }
        BudgetBreach::PropertyExpansionDepth { max_depth, .. } => {
            format!("property expansion nested deeper than {max_depth} levels")
        }
        BudgetBreach::PropertyInterpolationWork { max_work, .. } => {
            format!("property interpolation beyond {max_work} steps")
        }
        // A limit added by a later serde-saphyr.
        _ => "beyond one of the YAML parser's limits".to_owned(),
    }
}

/// `error` as a sentence: a budget breach is [`describe`]d, with where it happened; any other
/// error as serde-saphyr writes it.
#[must_use]
pub fn message(error: &serde_saphyr::Error, budget: &Budget) -> String {
    match error {
        serde_saphyr::Error::Budget { breach, location } => {
            let what = describe(breach, budget);
            if location.line() > 0 {
                format!(
                    "too large to read: {what} (at line {}, column {})",
                    location.line(),
                    location.column()
                )
            } else {
                format!("too large to read: {what}")
            }
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, budget: Budget) -> serde_saphyr::Error {
        let mut options = serde_saphyr::Options::default();
        options.budget = Some(budget);
        options.with_snippet = false;
        serde_saphyr::from_multiple_with_options::<serde_json::Value>(text, options).unwrap_err()
    }

    #[test]
    fn a_breach_reads_as_a_sentence_naming_the_limit_never_debug() {
        let mut budget = Budget::default();
        budget.max_documents = 3;
        let error = parse("a: 1\n---\nb: 2\n---\nc: 3\n---\nd: 4\n", budget.clone());
        let text = message(&error, &budget);
        assert!(
            text.starts_with("too large to read: more than 3 YAML documents (at line "),
            "{text}"
        );
        assert!(!text.contains('{'), "{text}");
        let mut budget = Budget::default();
        budget.max_depth = 2;
        let error = parse("a:\n  b:\n    c:\n      d: 1\n", budget.clone());
        assert!(
            message(&error, &budget).contains("nested deeper than 2 levels"),
            "{}",
            message(&error, &budget)
        );
    }

    #[test]
    fn local_files_read_far_more_documents_than_the_default() {
        let text: String = (0..2_000).map(|i| format!("---\nn: {i}\n")).collect();
        let mut options = serde_saphyr::Options::default();
        options.budget = Some(local_files());
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple_with_options(&text, options).unwrap();
        assert_eq!(docs.len(), 2_000);
        assert!(
            parse(&text, Budget::default())
                .to_string()
                .contains("budget")
        );
    }
}
