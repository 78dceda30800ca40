//! The typed twin of `lua/job-read-1.lua`: the API's reads of job records (one job, a page of jobs, a
//! few fields of many jobs). See the script's header.

use redis::Value;

use super::args::JobReadArgs;

use crate::reply::{at, decode_job, val_opt_str, Reply};
use crate::store::{Result, Store, StoredJob};

impl Store {
    /// The script's arguments, in the order of its header: `fields` empty reads whole jobs.
    fn job_read_args(&self, fields: &[&str], ids: &[String]) -> Vec<String> {
        let mut args = Vec::with_capacity(JobReadArgs::LEN + fields.len() + ids.len());
        JobReadArgs {
            prefix: self.keys().prefix().into(),
            nfields: fields.len().to_string(),
        }
        .push(&mut args);
        args.extend(fields.iter().map(|f| f.to_string()));
        args.extend(ids.iter().cloned());
        args
    }

    async fn job_read(&self, fields: &[&str], ids: &[String]) -> Result<Vec<Value>> {
        let Some(first) = ids.first() else {
            return Ok(Vec::new());
        };
        let args = self.job_read_args(fields, ids);
        let mut items = self
            .run(&self.scripts.job_read, &[self.keys().job(first)], args)
            .await?;
        let r = Reply::new(self.scripts.job_read.name, &items);
        if r.tag()? != "ok" {
            return Err(r.unknown_tag());
        }
        // One item per id; a missing job's is false (nil here), read as no fields.
        if items.len() != 1 + ids.len() {
            return Err(r.error(ids.len(), "one item per job id"));
        }
        items.remove(0);
        Ok(items)
    }

    /// One job, or None when there is no such job.
    pub async fn get_job(&self, id: &str) -> Result<Option<StoredJob>> {
        let one = [id.to_string()];
        Ok(self.job_read(&[], &one).await?.first().and_then(decode_job))
    }

    /// The jobs in one call, in the order of `ids` (None for a job that is gone).
    pub async fn jobs(&self, ids: &[String]) -> Result<Vec<Option<StoredJob>>> {
        Ok(self.job_read(&[], ids).await?.iter().map(decode_job).collect())
    }

    /// A few fields of each job in one call, read into a [`StoredJob`] that holds only those (None
    /// for a job that is gone, or that has none of them).
    pub async fn jobs_partial(&self, ids: &[String], fields: &[&str]) -> Result<Vec<Option<StoredJob>>> {
        assert!(!fields.is_empty(), "jobs_partial reads named fields");
        let items = self.job_read(fields, ids).await?;
        Ok((0..ids.len())
            .map(|i| match at(&items, i) {
                Value::Array(vs) => {
                    let mut job = StoredJob::default();
                    let mut any = false;
                    for (name, v) in fields.iter().zip(vs) {
                        if let Some(v) = val_opt_str(v) {
                            job.put(name, v);
                            any = true;
                        }
                    }
                    any.then_some(job)
                }
                _ => None,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_read_is_written_in_the_order_the_header_declares() {
        let args = super::super::test_store().job_read_args(&["state", "queue"], &["a".into(), "b".into()]);
        assert_eq!(args, ["ojs:{t}:", "2", "state", "queue", "a", "b"]);
    }
}
