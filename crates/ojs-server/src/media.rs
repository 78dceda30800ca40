//! The OJS JSON response: its media type and the helpers every answer and error is written with
//! (below the errors and the request extractors, which both use them).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

pub const OJS_MEDIA_TYPE: &str = "application/openjobspec+json";

/// A JSON response with the OJS media type: any serializable body, written straight to bytes (a typed
/// response need not become a `Value` first).
pub fn ojs_json(status: StatusCode, body: impl serde::Serialize) -> Response {
    let mut res = (status, axum::Json(body)).into_response();
    res.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(OJS_MEDIA_TYPE));
    res
}

pub fn ok(body: impl serde::Serialize) -> Response {
    ojs_json(StatusCode::OK, body)
}
