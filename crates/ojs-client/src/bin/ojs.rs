//! `ojs`: what an operator does from a shell, over the server's HTTP API (any pod, with its API key).
//!
//!   ojs stats                         queues with their counts
//!   ojs enqueue email.send --args '["a@example.com"]' --queue default --priority 1
//!   ojs job <id>                      one job, with its error history
//!   ojs rate-limits [key]             every key, or one key in detail
//!   ojs dead-letter list | retry <id> | delete <id>

use clap::{Parser, Subcommand};
use ojs_client::Client;
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
        queue: Option<String>,
        /// Seed model: lower runs first, default 2.
        #[arg(long)]
        priority: Option<i64>,
    },
    /// Show one job.
    Job { id: String },
    /// Rate-limit keys, or one key in detail.
    RateLimits { key: Option<String> },
    /// The dead letter set.
    DeadLetter {
        #[command(subcommand)]
        cmd: DeadCmd,
    },
}

#[derive(Subcommand)]
enum DeadCmd {
    List,
    Retry { id: String },
    Delete { id: String },
}

fn print(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
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
        } => {
            let args: Value =
                serde_json::from_str(&args).map_err(|e| anyhow::anyhow!("--args must be a JSON array: {e}"))?;
            let mut job = json!({"type": job_type, "args": args});
            if let Some(q) = queue {
                job["queue"] = json!(q);
            }
            if let Some(p) = priority {
                job["priority"] = json!(p);
            }
            print(&c.enqueue(&job).await?);
        }
        Cmd::Job { id } => print(&c.job(&id).await?),
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
    }
    Ok(())
}
