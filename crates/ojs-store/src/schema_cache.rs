//! This pod's copy of the schema registry (the JSON Schemas of job args, per type and version, on shard
//! 0: `ops/schema.rs`), as it last read it, with the validators compiled from it. It is the same
//! mechanism as the queues' tenancy settings (tenancy_cache.rs, tenancy.rs): the enqueue checks the jobs
//! with this copy, and the enqueue script checks the copy's stamp against the shard's own
//! (`P..'args:schemas:stamp'`, changed by every registry write): a stale copy costs one reload and one
//! retry, never a job checked against a schema that is no longer the registry's. A type without schemas
//! costs one map lookup per job and no Redis read; the copy is read once per stamp, whole (the registry
//! is bounded: [`ojs_core::job_version`]), and each validator is compiled on its first use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ojs_core::job::NewJob;
use serde_json::Value;

/// A schema as the registry accepts it: a JSON object with at least one keyword, valid against its
/// draft's meta-schema (the one its `$schema` names; Draft 7 without one, so the tuple form
/// `items: [...]` of the OJS examples is valid), compiled with no remote references and patterns that
/// match in linear time (no backreference, no lookaround). The error names what is wrong.
pub fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    match schema {
        Value::Object(m) if !m.is_empty() => {}
        Value::Object(_) => return Err("schema must not be empty: give at least one keyword".into()),
        other => return Err(format!("schema must be a JSON object (a JSON Schema); got {other}")),
    }
    let named = schema.get("$schema").is_some();
    let meta = if named {
        jsonschema::meta::validate(schema)
    } else {
        jsonschema::draft7::meta::validate(schema)
    };
    meta.map_err(|e| {
        let at = e.instance_path().to_string();
        format!(
            "schema is not a valid JSON Schema{}: {e}",
            if at.is_empty() {
                String::new()
            } else {
                format!(" at {at}")
            }
        )
    })?;
    // Patterns run on the `regex` engine, whose matching is linear in the text: a backreference or a
    // lookaround (which need backtracking, and made an enqueue of a long string burn a core for seconds,
    // past the request timeout) cannot compile, so such a schema is refused when it is registered.
    let mut options =
        jsonschema::options().with_pattern_options(jsonschema::PatternOptions::regex().size_limit(1 << 20));
    if !named {
        options = options.with_draft(jsonschema::Draft::Draft7);
    }
    options
        .build(schema)
        .map_err(|e| format!("schema cannot be compiled: {e}"))
}

/// One (type, version) of the registry: its schema text, compiled on first use.
struct Entry {
    text: String,
    compiled: Mutex<Option<Arc<jsonschema::Validator>>>,
}

/// The registry as one read saw it.
pub(crate) struct Registry {
    /// `P..'args:schemas:stamp'` at that read ('' when the registry was never written).
    pub(crate) stamp: String,
    /// Type → its versions, ascending.
    versions: HashMap<String, Vec<u32>>,
    entries: HashMap<(String, u32), Entry>,
}

impl Registry {
    /// From the stamp, the versions hash (type → `[[version, registered_at], …]`) and the schemas hash
    /// (`<type>\n<version>` → schema), read together.
    pub(crate) fn new(stamp: String, versions: HashMap<String, String>, schemas: HashMap<String, String>) -> Self {
        let versions = versions
            .into_iter()
            .map(|(t, list)| {
                let list: Vec<(u32, i64)> = serde_json::from_str(&list).unwrap_or_default();
                (t, list.into_iter().map(|(v, _)| v).collect())
            })
            .collect();
        let entries = schemas
            .into_iter()
            .filter_map(|(field, text)| {
                let (t, v) = field.split_once('\n')?;
                Some((
                    (t.to_string(), v.parse().ok()?),
                    Entry {
                        text,
                        compiled: Mutex::new(None),
                    },
                ))
            })
            .collect();
        Self {
            stamp,
            versions,
            entries,
        }
    }

    /// Whether no type has a schema (then nothing is checked).
    pub(crate) fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }

    /// The validator of a job type's args at `version` (None: its latest). `Ok(None)`: the type has no
    /// schema; `Err`: the job names a version the type does not have, or a stored schema that no longer
    /// compiles (both a 400 naming them).
    fn validator(
        &self,
        job_type: &str,
        version: Option<u32>,
    ) -> Result<Option<(u32, Arc<jsonschema::Validator>)>, String> {
        let Some(versions) = self.versions.get(job_type) else {
            return Ok(None);
        };
        let v = match version {
            Some(v) if versions.contains(&v) => v,
            Some(v) => {
                let known: Vec<String> = versions.iter().map(u32::to_string).collect();
                return Err(format!(
                    "version {v} of {job_type} has no schema in the registry (registered: {}); enqueue with one of them, or register it first",
                    known.join(", ")
                ));
            }
            None => match versions.last() {
                Some(v) => *v,
                None => return Ok(None),
            },
        };
        let entry = self
            .entries
            .get(&(job_type.to_string(), v))
            .ok_or_else(|| format!("the schema of {job_type} version {v} is missing from the registry"))?;
        let mut slot = entry.compiled.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = slot.as_ref() {
            return Ok(Some((v, Arc::clone(c))));
        }
        let schema: Value = serde_json::from_str(&entry.text)
            .map_err(|e| format!("the schema of {job_type} version {v} is not JSON: {e}"))?;
        let compiled =
            Arc::new(compile_schema(&schema).map_err(|e| format!("the schema of {job_type} version {v}: {e}"))?);
        *slot = Some(Arc::clone(&compiled));
        Ok(Some((v, compiled)))
    }

    /// Checks each job's args against its type's schema at its version: the first refusal as
    /// `(index, message, details)`; details name the type, the version, the failing instance path
    /// (inside `args`) and the schema path.
    pub(crate) fn check(&self, jobs: &[NewJob]) -> Result<(), (usize, String, Value)> {
        if self.is_empty() {
            return Ok(());
        }
        for (i, j) in jobs.iter().enumerate() {
            let refuse = |m: String, d: Value| (i, m, d);
            let found = self
                .validator(&j.job_type, j.version)
                .map_err(|m| refuse(m, serde_json::json!({ "job_type": j.job_type, "version": j.version })))?;
            let Some((v, validator)) = found else { continue };
            let args = args_of(&j.doc);
            let failed = validator.iter_errors(&args).next().map(|e| {
                (
                    e.instance_path().to_string(),
                    e.schema_path().to_string(),
                    e.to_string(),
                )
            });
            if let Some((path, schema_path, what)) = failed {
                let shown = if path.is_empty() {
                    "args".to_string()
                } else {
                    format!("args{path}")
                };
                return Err(refuse(
                    format!(
                        "{shown} does not match the schema of {} version {v}: {what}",
                        j.job_type
                    ),
                    serde_json::json!({
                        "job_type": j.job_type,
                        "version": v,
                        "instance_path": path,
                        "schema_path": schema_path,
                    }),
                ));
            }
        }
        Ok(())
    }
}

/// The `args` of a stored envelope (`NewJob::doc`, JSON text the envelope parser wrote).
fn args_of(doc: &str) -> Value {
    #[derive(serde::Deserialize)]
    struct Args {
        #[serde(default)]
        args: Value,
    }
    serde_json::from_str::<Args>(doc).map(|a| a.args).unwrap_or(Value::Null)
}

/// The pod's copy: None until first read, or after the enqueue script found it stale.
#[derive(Default)]
pub(crate) struct SchemaCache(Mutex<Option<Arc<Registry>>>);

impl SchemaCache {
    pub(crate) fn get(&self) -> Option<Arc<Registry>> {
        self.0.lock().ok().and_then(|m| m.clone())
    }

    pub(crate) fn put(&self, r: Registry) -> Arc<Registry> {
        let r = Arc::new(r);
        if let Ok(mut m) = self.0.lock() {
            *m = Some(Arc::clone(&r));
        }
        r
    }

    /// Forgets the copy whatever its stamp (this pod wrote the registry).
    pub(crate) fn forget_all(&self) {
        if let Ok(mut m) = self.0.lock() {
            *m = None;
        }
    }

    /// Forgets the copy if it still has `stamp` (a newer one read meanwhile is kept).
    pub(crate) fn forget(&self, stamp: &str) {
        if let Ok(mut m) = self.0.lock() {
            if m.as_ref().is_some_and(|r| r.stamp == stamp) {
                *m = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_schema_is_checked_against_its_draft() {
        // The tuple form of `items` (the OJS examples) is valid in Draft 7, the default.
        assert!(compile_schema(&json!({"type": "array", "items": [{"type": "string"}]})).is_ok());
        let e = compile_schema(&json!({"type": "nonsense"})).expect_err("refused");
        assert!(e.contains("not a valid JSON Schema"), "{e}");
        assert!(compile_schema(&json!({})).expect_err("empty").contains("empty"));
        assert!(compile_schema(&json!([1])).expect_err("array").contains("JSON object"));
        // 2020-12, named: `items` must be a schema there.
        let e = compile_schema(&json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "items": [{"type": "string"}]
        }))
        .expect_err("refused");
        assert!(e.contains("/items"), "{e}");
    }
}
