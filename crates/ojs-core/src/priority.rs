//! Priority: the one place that knows the two conventions.
//!
//! Everything below the HTTP edge works with a single internal *rank*: a signed integer where a lower
//! rank runs first. The edge converts the user's `priority` to a rank with [`PriorityModel::rank`] and
//! nothing else in the server knows which convention is in force.
//!
//! - `seed` (the default, `../shared/seeds/ojs-priority-spec.md`): top-level `priority`, integer
//!   `0..=MAX_SEED_PRIORITY`, lower runs first, default 2. rank = priority.
//! - `core` (the public OJS core spec and its conformance suite): `options.priority`, signed, higher runs
//!   first, default 0, -100..=100. rank = -priority.
//!
//! Ranks are exact integers far below 2^53, so a Redis sorted-set score holds them without rounding.

use serde::{Deserialize, Serialize};

/// Largest priority the seed model accepts: `u32::MAX`, so epoch seconds work as deadlines until 2106.
pub const MAX_SEED_PRIORITY: i64 = 4_294_967_295;
/// The core model's range, as the OJS core spec and its conformance suite define it.
pub const MIN_CORE_PRIORITY: i64 = -100;
pub const MAX_CORE_PRIORITY: i64 = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PriorityModel {
    /// Lower runs first, top-level `priority`, default 2 (the project's seed).
    #[default]
    Seed,
    /// Higher runs first, `options.priority`, default 0 (OJS core compatibility).
    Core,
}

impl PriorityModel {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "seed" => Some(Self::Seed),
            "core" => Some(Self::Core),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Seed => "seed",
            Self::Core => "core",
        }
    }

    pub fn default_priority(self) -> i64 {
        match self {
            Self::Seed => 2,
            Self::Core => 0,
        }
    }

    /// Inclusive range of accepted priorities.
    pub fn range(self) -> (i64, i64) {
        match self {
            Self::Seed => (0, MAX_SEED_PRIORITY),
            Self::Core => (MIN_CORE_PRIORITY, MAX_CORE_PRIORITY),
        }
    }

    /// Where the field lives on the envelope, for error messages.
    pub fn field(self) -> &'static str {
        match self {
            Self::Seed => "priority",
            Self::Core => "options.priority",
        }
    }

    /// The internal rank: lower runs first under both models.
    pub fn rank(self, priority: i64) -> i64 {
        match self {
            Self::Seed => priority,
            Self::Core => -priority,
        }
    }

    /// Validates a JSON priority value and returns it, with a message that names the field and range.
    pub fn check(self, v: &serde_json::Value) -> Result<i64, String> {
        let (lo, hi) = self.range();
        let field = self.field();
        let order = match self {
            Self::Seed => "lower runs first",
            Self::Core => "higher runs first",
        };
        let n = match v {
            serde_json::Value::Number(n) => n.as_i64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                    .map(|f| f as i64)
            }),
            _ => None,
        };
        match n {
            Some(p) if (lo..=hi).contains(&p) => Ok(p),
            _ => Err(format!(
                "{field} must be an integer from {lo} to {hi} ({order}); got {v}"
            )),
        }
    }

    /// [`PriorityModel::check`] for an integer already in hand (a CLI flag, a typed field).
    pub fn check_int(self, priority: i64) -> Result<i64, String> {
        self.check(&serde_json::Value::from(priority))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn seed_is_lower_first_and_core_is_higher_first() {
        assert!(PriorityModel::Seed.rank(0) < PriorityModel::Seed.rank(1));
        assert!(PriorityModel::Core.rank(10) < PriorityModel::Core.rank(1));
        assert_eq!(PriorityModel::Seed.default_priority(), 2);
        assert_eq!(PriorityModel::Core.default_priority(), 0);
    }

    #[test]
    fn checks_name_the_range() {
        let m = PriorityModel::Seed;
        assert_eq!(m.check(&json!(0)), Ok(0));
        assert_eq!(m.check(&json!(2_147_483_647)), Ok(2_147_483_647));
        assert_eq!(m.check(&json!(MAX_SEED_PRIORITY)), Ok(MAX_SEED_PRIORITY));
        let e = m.check(&json!(-1)).unwrap_err();
        assert!(e.contains("0 to 4294967295"), "{e}");
        assert!(m.check(&json!(1.5)).is_err());
        assert!(m.check(&json!("1")).is_err());
        assert!(m.check(&json!(MAX_SEED_PRIORITY + 1)).is_err());
        assert_eq!(PriorityModel::Core.check(&json!(-100)), Ok(-100));
        assert_eq!(m.check_int(7), Ok(7));
        assert_eq!(m.check_int(-1), m.check(&json!(-1)));
        assert!(PriorityModel::Core.check_int(101).is_err());
    }
}
