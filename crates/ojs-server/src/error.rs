//! The API error: an [`OjsError`] rendered in the OJS error shape with its HTTP status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ojs_core::{ErrorCode, OjsError};
use ojs_store::StoreError;

use crate::media::ojs_json;

#[derive(Debug)]
pub struct ApiError(pub OjsError);

pub type ApiResult<T> = Result<T, ApiError>;

impl From<OjsError> for ApiError {
    fn from(e: OjsError) -> Self {
        Self(e)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) => {
                tracing::warn!(error = %m, "redis unavailable");
                Self(OjsError::new(
                    ErrorCode::BackendUnavailable,
                    "the job store (Redis) is unavailable; retry shortly",
                ))
            }
            StoreError::Invalid(m) => Self(OjsError::invalid(m)),
            StoreError::Contended(m) => Self(OjsError::new(ErrorCode::BackendUnavailable, m)),
            StoreError::InvalidWith(m, details) => Self(OjsError::invalid(m).with_details(details)),
            other => {
                tracing::error!(error = %other, "store error");
                Self(OjsError::new(ErrorCode::Internal, format!("internal error: {other}")))
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        // Serialized from the type the OpenAPI document describes (`schemas::OjsErrorBody`).
        let body =
            serde_json::to_value(crate::schemas::OjsErrorBody::from(&self.0)).unwrap_or_else(|_| self.0.body(None));
        let mut res = ojs_json(status, body);
        if matches!(self.0.code, ErrorCode::BackendUnavailable | ErrorCode::QueueFull) {
            res.headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        if self.0.code == ErrorCode::QueueFull {
            // ojs-backpressure §7.2: the depth and bound travel as headers too.
            let d = self.0.details.clone().unwrap_or_default();
            for (header, field) in [("x-ojs-queue-depth", "depth"), ("x-ojs-queue-bound", "bound")] {
                if let Some(v) = d[field].as_u64().and_then(|v| v.to_string().parse().ok()) {
                    res.headers_mut().insert(header, v);
                }
            }
        }
        res
    }
}
