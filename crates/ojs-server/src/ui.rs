//! The dashboard: one self-contained HTML page compiled into the binary and served at `/ui`. It talks
//! to the same API as everyone else (with the API key the operator types in), so it needs no state and
//! no server of its own; live updates come from the SSE event stream.

use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use crate::state::AppState;

const INDEX: &str = include_str!("ui/index.html");

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/", get(|| async { Redirect::temporary("/ui") }))
}

async fn index() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            // The page only loads itself and calls this origin's API.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'",
            ),
        ],
        INDEX,
    )
        .into_response()
}
