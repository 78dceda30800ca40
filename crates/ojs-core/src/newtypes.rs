//! Values that cross the HTTP boundary, each with one typed, validated definition: [`JobId`],
//! [`QueueName`] and [`Priority`]. A value of these types passed its check when it was made (parsed,
//! or read by serde), so whoever holds one need not check it again. The rules are the ones in
//! `names.rs` and `priority.rs`; this room only wraps them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::names;
use crate::priority::PriorityModel;

/// A string newtype checked by `$check` when parsed or deserialized; serde reads and writes the string.
macro_rules! checked_name {
    ($(#[$doc:meta])* $name:ident, $check:path) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Checks `s` and wraps it; the error names the rule it broke.
            pub fn parse(s: &str) -> Result<Self, String> {
                Self::try_from(s.to_owned())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = String;

            fn try_from(s: String) -> Result<Self, String> {
                $check(&s)?;
                Ok(Self(s))
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }

        impl FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                Self::parse(s)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    };
}

checked_name!(
    /// A job id: a lowercase hyphenated UUIDv7 ([`names::check_job_id`]).
    JobId,
    names::check_job_id
);

checked_name!(
    /// A queue name: `^[a-z0-9][a-z0-9.-]*$`, at most 255 bytes ([`names::check_queue`]).
    QueueName,
    names::check_queue
);

impl JobId {
    /// A new id, as the server makes them ([`names::new_job_id`]).
    pub fn generate() -> Self {
        Self(names::new_job_id())
    }
}

/// A priority in the seed model (the server's default, [`PriorityModel::Seed`]): an integer from 0 to
/// [`crate::priority::MAX_SEED_PRIORITY`], lower runs first, default 2. Its order is the run order: a
/// smaller `Priority` runs first. A server in the `core` model reads priorities the other way round
/// (and from `options.priority`), so this type is for seed-model servers only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Priority(i64);

impl Priority {
    /// Checks `p` with the seed model's rule ([`PriorityModel::check_int`]).
    pub fn new(p: i64) -> Result<Self, String> {
        PriorityModel::Seed.check_int(p).map(Self)
    }

    pub const fn get(self) -> i64 {
        self.0
    }
}

impl Default for Priority {
    fn default() -> Self {
        Self(PriorityModel::Seed.default_priority())
    }
}

impl FromStr for Priority {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let p = s
            .trim()
            .parse::<i64>()
            .map_err(|_| format!("priority must be an integer; got {s:?}"))?;
        Self::new(p)
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<'de> Deserialize<'de> for Priority {
    /// Any JSON number the seed model accepts (an integral `1.0` too, as the server does).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = serde_json::Number::deserialize(d)?;
        PriorityModel::Seed
            .check(&serde_json::Value::Number(n))
            .map(Self)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ID: &str = "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f";

    #[test]
    fn a_job_id_is_a_lowercase_uuid_v7() {
        let id = JobId::parse(ID).expect("valid");
        assert_eq!(id.as_str(), ID);
        assert_eq!(id, ID);
        assert_eq!(id.to_string(), ID);
        assert_eq!(ID.parse::<JobId>(), Ok(id.clone()));
        assert!(JobId::parse(JobId::generate().as_str()).is_ok());
        for bad in [
            "",
            "j1",
            "550e8400-e29b-41d4-a716-446655440000",
            "019461A8-1A2B-7C3D-8E4F-5A6B7C8D9E0F",
        ] {
            let e = JobId::parse(bad).expect_err(bad);
            assert!(e.contains("UUIDv7"), "{e}");
        }
    }

    #[test]
    fn a_job_id_round_trips_through_json_and_json_cannot_smuggle_a_bad_one() {
        let id = JobId::parse(ID).expect("valid");
        let v = serde_json::to_value(&id).expect("json");
        assert_eq!(v, json!(ID));
        assert_eq!(serde_json::from_value::<JobId>(v).expect("back"), id);
        assert!(serde_json::from_value::<JobId>(json!("not-an-id")).is_err());
        assert!(serde_json::from_value::<JobId>(json!(7)).is_err());
    }

    #[test]
    fn a_queue_name_follows_the_queue_rule() {
        for ok in ["default", "a.b-c", "0queue"] {
            assert_eq!(QueueName::parse(ok).expect(ok).as_str(), ok);
        }
        for bad in ["", "Default", "a:b", "a{b}", "my queue", "-x"] {
            assert_eq!(QueueName::parse(bad), Err(names::check_queue(bad).expect_err(bad)));
        }
        let q: QueueName = serde_json::from_value(json!("reports")).expect("json");
        assert_eq!(serde_json::to_string(&q).expect("json"), "\"reports\"");
        assert!(serde_json::from_value::<QueueName>(json!("Reports")).is_err());
    }

    #[test]
    fn a_priority_is_a_seed_model_priority() {
        assert_eq!(Priority::default().get(), 2);
        assert_eq!(Priority::new(0).map(Priority::get), Ok(0));
        let max = crate::priority::MAX_SEED_PRIORITY;
        assert_eq!(Priority::new(max).map(Priority::get), Ok(max));
        assert!(Priority::new(-1).is_err());
        assert!(Priority::new(max + 1).is_err());
        assert!(Priority::new(1) < Ok(Priority::default()), "lower runs first");
        assert_eq!("5".parse::<Priority>().map(Priority::get), Ok(5));
        assert!("five".parse::<Priority>().is_err());
        assert!("-3".parse::<Priority>().is_err());
    }

    #[test]
    fn a_priority_round_trips_through_json_with_the_servers_rule() {
        let p = Priority::new(9).expect("valid");
        assert_eq!(serde_json::to_value(p).expect("json"), json!(9));
        assert_eq!(serde_json::from_value::<Priority>(json!(9)).expect("back"), p);
        assert_eq!(serde_json::from_value::<Priority>(json!(9.0)).expect("integral"), p);
        for bad in [json!(-1), json!(1.5), json!("1"), json!(null)] {
            assert!(serde_json::from_value::<Priority>(bad.clone()).is_err(), "{bad}");
        }
    }
}
