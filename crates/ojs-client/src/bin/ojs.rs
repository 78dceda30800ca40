//! `ojs`: what an operator does from a shell, over the server's HTTP API (any pod, with its API key).
//!
//!   ojs stats                         queues with their counts
//!   ojs enqueue email.send --args '["a@example.com"]' --queue default --priority 1
//!   ojs enqueue report.build --unique type,args --unique-period PT1H --on-conflict ignore
//!   ojs job <id>                      one job, with its error history
//!   ojs job explain <id> [--json]     why it is not running yet: one line per gate that holds it
//!   ojs rate-limits [key]             every key, or one key in detail
//!   ojs dead-letter list | retry <id> | delete <id>
//!   ojs cron list | show <name> | delete <name>
//!   ojs cron add nightly '0 3 * * *' report.build --timezone Europe/Berlin --queue reports
//!   ojs workflow list | show <id> | cancel <id>
//!   ojs workflow create etl.json      a chain, group or batch definition (`-` reads standard input)

use clap::{Parser, Subcommand};
use ojs_client::{Client, JobId, Priority, QueueName};
use serde_json::{json, Value};

#[derive(Parser)]
#[command(name = "ojs", version, about = "Operate an OJS server from a shell")]
struct Cli {
    /// The server.
    #[arg(long, env = "OJS_URL", default_value = "http://127.0.0.1:8080", global = true)]
    url: String,
    /// API key (admin for the dead-letter commands).
    #[arg(long, env = "OJS_API_KEY", global = true, hide_env_values = true)]
    api_key: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Queues and their job counts by state.
    Stats,
    /// Enqueue one job.
    Enqueue {
        /// The job type, e.g. email.send.
        job_type: String,
        /// Positional arguments, a JSON array.
        #[arg(long, default_value = "[]")]
        args: String,
        #[arg(long)]
        queue: Option<QueueName>,
        /// Seed model: lower runs first, default 2.
        #[arg(long)]
        priority: Option<Priority>,
        /// Make the job unique by these parts (comma-separated: type, args, queue, meta).
        #[arg(long, value_delimiter = ',')]
        unique: Vec<String>,
        /// How long the uniqueness holds (ISO 8601, e.g. PT1H); with --unique.
        #[arg(long, requires = "unique")]
        unique_period: Option<String>,
        /// reject (default), ignore, replace, replace_except_schedule or raise_priority; with --unique.
        #[arg(long, requires = "unique")]
        on_conflict: Option<String>,
    },
    /// Show one job (`ojs job ID`), or why it waits (`ojs job explain ID`).
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Job {
        #[arg(required = true)]
        id: Option<JobId>,
        #[command(subcommand)]
        cmd: Option<JobCmd>,
    },
    /// Rate-limit keys, or one key in detail.
    RateLimits { key: Option<String> },
    /// The dead letter set.
    DeadLetter {
        #[command(subcommand)]
        cmd: DeadCmd,
    },
    /// Cron entries (periodic jobs).
    Cron {
        #[command(subcommand)]
        cmd: CronCmd,
    },
    /// Workflows: chains, groups and batches.
    Workflow {
        #[command(subcommand)]
        cmd: WorkflowCmd,
    },
}

#[derive(Subcommand)]
enum JobCmd {
    /// Why the job is not running yet: its state and one line per gate that holds it.
    Explain {
        id: JobId,
        /// Print the server's answer as it is.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum CronCmd {
    /// Every entry, with its next and last run.
    List,
    Show {
        name: String,
    },
    /// Register (or update) an entry that enqueues `job_type` on `expression`.
    Add {
        name: String,
        /// 5 or 6 fields, or @hourly-style.
        expression: String,
        job_type: String,
        /// An IANA zone (default UTC).
        #[arg(long)]
        timezone: Option<String>,
        #[arg(long, default_value = "[]")]
        args: String,
        #[arg(long)]
        queue: Option<QueueName>,
        /// Seed model: lower runs first, default 2.
        #[arg(long)]
        priority: Option<Priority>,
        /// skip (default), allow, cancel_previous or enqueue.
        #[arg(long)]
        overlap: Option<String>,
    },
    Delete {
        name: String,
    },
}

#[derive(Subcommand)]
enum WorkflowCmd {
    /// Workflows, newest first.
    List,
    /// One workflow with its jobs' states.
    Show { id: String },
    /// Cancel a running workflow and its unfinished jobs.
    Cancel { id: String },
    /// Create one from a JSON definition in a file (`-`: standard input).
    Create { file: String },
}

#[derive(Subcommand)]
enum DeadCmd {
    List,
    Retry { id: String },
    Delete { id: String },
}

fn json_arg(name: &str, text: &str) -> anyhow::Result<Value> {
    serde_json::from_str(text).map_err(|e| anyhow::anyhow!("{name} must be JSON: {e}"))
}

fn print(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// `GET /jobs/{id}/explain`'s answer for a reader: the job, its state and whether it waits; the
/// answer's sentence; one line per gate (its name, detail, until when, how many jobs are ahead, then
/// any other member as `name=value`); when it may run.
fn explain_text(v: &Value) -> String {
    let s = |x: &Value| match x {
        Value::String(t) => t.clone(),
        other => other.to_string(),
    };
    let waiting = match v["waiting"].as_bool() {
        Some(true) => "waiting",
        Some(false) => "not waiting",
        None => "",
    };
    let head = [format!("job {}", s(&v["job_id"])), s(&v["state"]), waiting.to_string()];
    let mut out = head
        .into_iter()
        .filter(|p| !p.is_empty() && p != "null")
        .collect::<Vec<_>>()
        .join("  ");
    out.push('\n');
    if let Some(d) = v["detail"].as_str().filter(|d| !d.is_empty()) {
        out.push_str(d);
        out.push('\n');
    }
    let waits = v["waiting"].as_bool() != Some(false);
    let gates = v["gates"].as_array().map(Vec::as_slice).unwrap_or_default();
    if gates.is_empty() && waits {
        out.push_str("  no gate holds it\n");
    }
    for g in gates {
        let present = |k: &str| g.get(k).filter(|x| !x.is_null());
        let mut parts = vec![format!("{:<12}", s(&g["gate"]))];
        parts.extend(present("detail").map(s));
        match (present("until"), present("until_ms")) {
            (Some(u), _) => parts.push(format!("until {}", s(u))),
            (None, Some(ms)) => parts.push(format!("until_ms {ms}")),
            (None, None) => {}
        }
        parts.extend(present("ahead").map(|a| format!("{} ahead", s(a))));
        for (k, x) in g.as_object().into_iter().flatten() {
            if !["gate", "detail", "until", "until_ms", "ahead"].contains(&k.as_str()) && !x.is_null() {
                parts.push(format!("{k}={}", s(x)));
            }
        }
        out.push_str("  ");
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    }
    match v.get("runnable_at").filter(|r| !r.is_null()) {
        Some(r) => out.push_str(&format!("runnable at {}\n", s(r))),
        None if waits => out.push_str("runnable at: not known\n"),
        None => {}
    }
    out
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let c = Client::new(&cli.url, cli.api_key.clone());
    match cli.cmd {
        Cmd::Stats => {
            let v = c.get("/ojs/v1/queues").await?;
            println!(
                "{:<24} {:>8} {:>10} {:>7} {:>10} {:>10} {:>7} {:>10}",
                "queue", "status", "available", "active", "scheduled", "completed", "failed", "discarded"
            );
            for q in v["queues"].as_array().into_iter().flatten() {
                let n = |k: &str| q[k].as_u64().unwrap_or(0);
                println!(
                    "{:<24} {:>8} {:>10} {:>7} {:>10} {:>10} {:>7} {:>10}",
                    q["name"].as_str().unwrap_or(""),
                    q["status"].as_str().unwrap_or(""),
                    n("available"),
                    n("active"),
                    n("scheduled"),
                    n("completed"),
                    n("failed"),
                    n("discarded")
                );
            }
        }
        Cmd::Enqueue {
            job_type,
            args,
            queue,
            priority,
            unique,
            unique_period,
            on_conflict,
        } => {
            let args = json_arg("--args", &args)?;
            let mut job = json!({"type": job_type, "args": args});
            if let Some(q) = queue {
                job["queue"] = json!(q);
            }
            if let Some(p) = priority {
                job["priority"] = json!(p);
            }
            if !unique.is_empty() {
                // The server validates the policy (and names what is wrong); the CLI only shapes it.
                let mut policy = json!({"keys": unique});
                if let Some(p) = unique_period {
                    policy["period"] = json!(p);
                }
                if let Some(c) = on_conflict {
                    policy["on_conflict"] = json!(c);
                }
                job["options"] = json!({"unique": policy});
            }
            // The whole job as the server shows it (Client::enqueue answers the typed part).
            print(&c.post("/ojs/v1/jobs", &job).await?["job"]);
        }
        Cmd::Job {
            cmd: Some(JobCmd::Explain { id, json }),
            ..
        } => {
            // Typed on the way in (ojs-core's JobExplanation); shown member by member.
            let v = serde_json::to_value(c.explain(&id).await?)?;
            if json {
                print(&v);
            } else {
                print!("{}", explain_text(&v));
            }
        }
        Cmd::Job {
            id: Some(id),
            cmd: None,
        } => print(&c.job_json(&id).await?),
        Cmd::Job { id: None, cmd: None } => anyhow::bail!("ojs job needs an id (or: ojs job explain ID)"),
        Cmd::RateLimits { key: Some(k) } => print(&c.get(&format!("/ojs/v1/rate-limits/{k}")).await?),
        Cmd::RateLimits { key: None } => print(&c.get("/ojs/v1/rate-limits?per_page=100").await?),
        Cmd::DeadLetter { cmd: DeadCmd::List } => print(&c.get("/ojs/v1/dead-letter").await?),
        Cmd::DeadLetter {
            cmd: DeadCmd::Retry { id },
        } => print(&c.post(&format!("/ojs/v1/dead-letter/{id}/retry"), &json!({})).await?),
        Cmd::DeadLetter {
            cmd: DeadCmd::Delete { id },
        } => print(
            &c.request(reqwest::Method::DELETE, &format!("/ojs/v1/dead-letter/{id}"), None)
                .await?,
        ),
        Cmd::Cron { cmd: CronCmd::List } => {
            let v = c.get("/ojs/v1/cron?per_page=1000").await?;
            println!(
                "{:<32} {:<20} {:<20} {:<26} {:>6}",
                "name", "expression", "timezone", "next run", "runs"
            );
            for e in v["crons"].as_array().into_iter().flatten() {
                let t = |k: &str| e[k].as_str().unwrap_or("-").to_string();
                println!(
                    "{:<32} {:<20} {:<20} {:<26} {:>6}",
                    t("name"),
                    t("expression"),
                    t("timezone"),
                    t("next_run_at"),
                    e["run_count"].as_u64().unwrap_or(0)
                );
            }
        }
        Cmd::Cron {
            cmd: CronCmd::Show { name },
        } => print(&c.get(&format!("/ojs/v1/cron/{name}")).await?),
        Cmd::Cron {
            cmd:
                CronCmd::Add {
                    name,
                    expression,
                    job_type,
                    timezone,
                    args,
                    queue,
                    priority,
                    overlap,
                },
        } => {
            let mut template = json!({"type": job_type, "args": json_arg("--args", &args)?});
            if let Some(q) = queue {
                template["queue"] = json!(q);
            }
            if let Some(p) = priority {
                template["priority"] = json!(p);
            }
            let mut entry = json!({"name": name, "expression": expression, "job_template": template});
            if let Some(tz) = timezone {
                entry["timezone"] = json!(tz);
            }
            if let Some(o) = overlap {
                entry["overlap_policy"] = json!(o);
            }
            print(&c.post("/ojs/v1/cron", &entry).await?);
        }
        Cmd::Cron {
            cmd: CronCmd::Delete { name },
        } => print(
            &c.request(reqwest::Method::DELETE, &format!("/ojs/v1/cron/{name}"), None)
                .await?,
        ),
        Cmd::Workflow { cmd: WorkflowCmd::List } => {
            let v = c.get("/ojs/v1/workflows?per_page=100").await?;
            println!(
                "{:<36} {:<6} {:<10} {:>9} {:>7} {:>7}  name",
                "id", "type", "state", "completed", "failed", "total"
            );
            for w in v["workflows"].as_array().into_iter().flatten() {
                let m = &w["metadata"];
                let n = |k: &str| m[k].as_u64().unwrap_or(0);
                println!(
                    "{:<36} {:<6} {:<10} {:>9} {:>7} {:>7}  {}",
                    w["id"].as_str().unwrap_or(""),
                    w["type"].as_str().unwrap_or(""),
                    w["state"].as_str().unwrap_or(""),
                    n("completed_count"),
                    n("failed_count"),
                    n("job_count"),
                    w["name"].as_str().unwrap_or("")
                );
            }
        }
        Cmd::Workflow {
            cmd: WorkflowCmd::Show { id },
        } => print(&c.get(&format!("/ojs/v1/workflows/{id}")).await?),
        Cmd::Workflow {
            cmd: WorkflowCmd::Cancel { id },
        } => print(
            &c.request(reqwest::Method::DELETE, &format!("/ojs/v1/workflows/{id}"), None)
                .await?,
        ),
        Cmd::Workflow {
            cmd: WorkflowCmd::Create { file },
        } => {
            let text = if file == "-" {
                std::io::read_to_string(std::io::stdin())?
            } else {
                std::fs::read_to_string(&file).map_err(|e| anyhow::anyhow!("cannot read {file}: {e}"))?
            };
            print(&c.post("/ojs/v1/workflows", &json_arg(&file, &text)?).await?);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explain_prints_one_line_per_gate() {
        let v = json!({
            "job_id": "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f",
            "state": "available",
            "waiting": true,
            "detail": "key payment-api is full; 12 jobs before it",
            "gates": [
                {"gate": "rate", "detail": "key payment-api is full", "until": "2026-11-28T01:00:00.000Z",
                    "until_ms": 1_795_000_000_000u64, "ahead": 3, "key": "payment-api", "limit": 10, "current": 10},
                {"gate": "order", "detail": "12 job(s) come before it", "until": null, "until_ms": null, "ahead": 12},
                {"gate": "throttle", "until_ms": 5}
            ],
            "runnable_at": "2026-11-28T01:00:00.000Z"
        });
        let text = explain_text(&v);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "{text}");
        assert_eq!(lines[0], "job 019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f  available  waiting");
        assert_eq!(lines[1], "key payment-api is full; 12 jobs before it");
        assert_eq!(
            lines[2],
            "  rate          key payment-api is full  until 2026-11-28T01:00:00.000Z  3 ahead  key=payment-api  limit=10  current=10"
        );
        assert_eq!(lines[3], "  order         12 job(s) come before it  12 ahead");
        assert_eq!(lines[4], "  throttle      until_ms 5");
        assert_eq!(lines[5], "runnable at 2026-11-28T01:00:00.000Z");
        let ended = explain_text(&json!({"job_id": "j", "state": "completed", "waiting": false,
            "detail": "not waiting: it ended completed", "gates": [], "runnable_at": null}));
        assert_eq!(
            ended,
            "job j  completed  not waiting\nnot waiting: it ended completed\n"
        );
        let free = explain_text(
            &json!({"job_id": "j", "state": "available", "waiting": true, "gates": [],
            "runnable_at": "2026-11-28T01:00:00.000Z"}),
        );
        assert_eq!(
            free,
            "job j  available  waiting\n  no gate holds it\nrunnable at 2026-11-28T01:00:00.000Z\n"
        );
        let paused = explain_text(&json!({"job_id": "j", "state": "available", "waiting": true,
            "gates": [{"gate": "paused", "detail": "queue q is paused", "until": null, "until_ms": null, "ahead": null}],
            "runnable_at": null}));
        assert!(
            paused.ends_with("\n  paused        queue q is paused\nrunnable at: not known\n"),
            "{paused}"
        );
    }

    #[test]
    fn job_takes_an_id_or_explain() {
        let id = "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f";
        let parse = |args: &[&str]| Cli::try_parse_from([&["ojs"], args].concat());
        assert!(matches!(
            parse(&["job", id]).map(|c| c.cmd),
            Ok(Cmd::Job { id: Some(_), cmd: None })
        ));
        assert!(matches!(
            parse(&["job", "explain", id, "--json"]).map(|c| c.cmd),
            Ok(Cmd::Job {
                cmd: Some(JobCmd::Explain { json: true, .. }),
                ..
            })
        ));
        assert!(parse(&["job"]).is_err());
        assert!(parse(&["job", "not-an-id"]).is_err());
        assert!(parse(&["job", "explain", "nope"]).is_err());
        assert!(parse(&["enqueue", "t", "--priority", "-1"]).is_err());
        assert!(parse(&["enqueue", "t", "--queue", "Bad Queue"]).is_err());
    }
}
