//! The budgets a template's execution runs within (steps, allocation) and the maps it
//! created, shared by the evaluator and the functions it calls. A leaf of the evaluator.

use std::collections::BTreeMap;
use std::rc::Rc;

use super::format;
use super::value::{MapCell, Value};
use super::{MAX_ALLOCATED, MAX_STEPS, MAX_VALUE};

/// What functions may touch while running: the budgets, and every map they create (so
/// reference cycles made with `set` are broken when rendering ends).
pub(crate) struct Ctx {
    maps: Vec<Rc<MapCell>>,
    steps: u64,
    allocated: usize,
}

impl Ctx {
    pub(crate) fn new() -> Self {
        Ctx {
            maps: Vec::new(),
            steps: 0,
            allocated: 0,
        }
    }

    pub(crate) fn new_map(
        &mut self,
        entries: BTreeMap<Vec<u8>, Value>,
        strings_only: bool,
    ) -> Value {
        let map = Rc::new(MapCell::new(entries, strings_only));
        self.maps.push(Rc::clone(&map));
        Value::Map(map)
    }

    /// Counts one unit of work.
    pub(crate) fn step(&mut self) -> Result<(), String> {
        self.step_n(1)
    }

    /// Counts `n` units of work.
    pub(crate) fn step_n(&mut self, n: u64) -> Result<(), String> {
        self.steps = self.steps.saturating_add(n);
        if self.steps > MAX_STEPS {
            return Err(format!("template execution exceeded {MAX_STEPS} steps"));
        }
        Ok(())
    }

    /// `reflect.DeepEqual`, paid for from the step budget.
    pub(crate) fn deep_equal(&mut self, a: &Value, b: &Value) -> Result<bool, String> {
        let start = MAX_STEPS.saturating_sub(self.steps);
        let mut fuel = start;
        let equal = super::value::deep_equal(a, b, 0, &mut fuel);
        self.steps = self.steps.saturating_add(start - fuel);
        equal
    }

    pub(crate) fn charge(&mut self, v: &Value) -> Result<(), String> {
        if let Value::Str(s) = v
            && s.as_bytes().len() > MAX_VALUE
        {
            return Err(format::too_large());
        }
        self.allocated = self.allocated.saturating_add(v.weight());
        if self.allocated > MAX_ALLOCATED {
            return Err(format!(
                "template execution allocated more than {} MiB",
                MAX_ALLOCATED >> 20
            ));
        }
        Ok(())
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        for map in &self.maps {
            map.clear();
        }
    }
}
