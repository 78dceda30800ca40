//! Request bodies in, responses out: the OJS media type both ways, and malformed bodies answered in
//! the OJS error shape instead of axum's plain-text rejections.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use ojs_core::{ErrorCode, JobId, OjsError, QueueName};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;

pub use crate::media::{ojs_json, ok, OJS_MEDIA_TYPE};

/// With `--response-content-type json`, answers `application/json` instead of the OJS media type
/// (same body): the Python SDK 0.4 parses a reply only when its Content-Type contains
/// `application/json`. Other content types (SSE, Prometheus text, the dashboard) are left alone.
/// `lib.rs`'s edge middleware applies it to every response.
pub fn fix_content_type(config: &crate::config::Config, res: &mut Response) {
    if config.response_content_type == crate::config::ResponseContentType::Json
        && res
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes() == OJS_MEDIA_TYPE.as_bytes())
    {
        res.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
}

/// A JSON body: `application/openjobspec+json` or `application/json` (or no Content-Type at all).
/// curl's default `application/x-www-form-urlencoded` is accepted too, so that `curl -d '{…}'` works:
/// the body must still be JSON (a real form body is a 400 `invalid_payload`).
pub struct OjsJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for OjsJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = json_body(req, state).await?;
        let value: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
            Value::Object(Default::default())
        } else {
            serde_json::from_slice(&bytes).map_err(|e| {
                OjsError::new(
                    ErrorCode::InvalidPayload,
                    format!("request body is not valid JSON: {e}"),
                )
            })?
        };
        let t = serde_json::from_value(value).map_err(|e| {
            OjsError::new(
                ErrorCode::InvalidRequest,
                format!("request body has the wrong shape: {e}"),
            )
        })?;
        Ok(Self(t))
    }
}

/// A JSON object read straight into `T`, as [`OjsJson`] accepts it, for a `T` that keeps members as the
/// client wrote them (`Box<RawValue>`: a checkpoint's state is stored as sent, digits and all, where a
/// `Value` would round a number past 2^64). `T` cannot use `#[serde(flatten)]` with raw members.
pub struct OjsRawJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for OjsRawJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = json_body(req, state).await?;
        let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        // serde would take a struct from an array too, member by member.
        if text.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(OjsError::new(ErrorCode::InvalidRequest, "request body must be a JSON object").into());
        }
        serde_json::from_slice(text).map(Self).map_err(|e| {
            let (code, what) = match e.classify() {
                serde_json::error::Category::Data => (ErrorCode::InvalidRequest, "has the wrong shape"),
                _ => (ErrorCode::InvalidPayload, "is not valid JSON"),
            };
            OjsError::new(code, format!("request body {what}: {e}")).into()
        })
    }
}

/// The body of a JSON request, after its Content-Type is checked (see [`OjsJson`]).
async fn json_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
        let ct = ct
            .to_str()
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if !ct.is_empty()
            && ct != OJS_MEDIA_TYPE
            && ct != "application/json"
            && ct != "application/x-www-form-urlencoded"
            && !ct.ends_with("+json")
        {
            return Err(OjsError::new(
                ErrorCode::UnsupportedMediaType,
                format!("Content-Type {ct} is not supported; use {OJS_MEDIA_TYPE} or application/json"),
            )
            .into());
        }
    }
    Bytes::from_request(req, state).await.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            OjsError::new(
                ErrorCode::PayloadTooLarge,
                "request body is larger than the server accepts",
            )
            .into()
        } else {
            OjsError::new(
                ErrorCode::InvalidPayload,
                format!("could not read the request body: {e}"),
            )
            .into()
        }
    })
}

/// Query parameters: like axum's `Query`, but a query that does not parse is a 400 in the OJS error
/// shape (axum answers plain text).
pub struct OjsQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> axum::extract::FromRequestParts<S> for OjsQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(t)| Self(t))
            .map_err(|e| OjsError::invalid(format!("invalid query: {}", e.body_text())).into())
    }
}

/// A path parameter: like axum's `Path`, but one that does not decode (such as invalid UTF-8) is a 400
/// in the OJS error shape (axum answers plain text).
pub struct OjsPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> axum::extract::FromRequestParts<S> for OjsPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(t)| Self(t))
            .map_err(|e| OjsError::invalid(format!("invalid path: {}", e.body_text())).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    async fn parse(content_type: Option<&str>, body: &'static str) -> Result<Value, ErrorCode> {
        let mut req = Request::builder().method("POST").uri("/");
        if let Some(ct) = content_type {
            req = req.header(header::CONTENT_TYPE, ct);
        }
        let req = req.body(Body::from(body)).expect("request");
        match OjsJson::<Value>::from_request(req, &()).await {
            Ok(OjsJson(v)) => Ok(v),
            Err(e) => Err(e.0.code),
        }
    }

    #[tokio::test]
    async fn json_bodies_are_accepted_under_curls_default_content_type() {
        for ct in [
            None,
            Some("application/openjobspec+json"),
            Some("application/json; charset=utf-8"),
            Some("application/x-www-form-urlencoded"),
        ] {
            assert_eq!(parse(ct, r#"{"a":1}"#).await, Ok(serde_json::json!({"a": 1})), "{ct:?}");
        }
        let form = Some("application/x-www-form-urlencoded");
        assert_eq!(parse(form, "a=1&b=2").await, Err(ErrorCode::InvalidPayload));
        assert_eq!(
            parse(Some("text/plain"), "{}").await,
            Err(ErrorCode::UnsupportedMediaType)
        );
    }
}

/// A job id from a request (a path, or a worker's `job_id`): a string that is not a job id names no
/// job, so it is answered as an unknown one (404), as the OJS HTTP binding asks.
pub fn job_id(id: &str) -> Result<JobId, OjsError> {
    JobId::parse(id).map_err(|_| OjsError::not_found("job", id))
}

/// The `{id}` of a job route, typed ([`job_id`]).
pub struct JobPath(pub JobId);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for JobPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        let OjsPath(id) = OjsPath::<String>::from_request_parts(parts, state).await?;
        Ok(Self(job_id(&id)?))
    }
}

/// The `{name}` of a queue route, typed: a name that breaks the queue-name rules is a 400 naming them.
pub struct QueuePath(pub QueueName);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for QueuePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        let OjsPath(name) = OjsPath::<String>::from_request_parts(parts, state).await?;
        Ok(Self(QueueName::parse(&name).map_err(OjsError::invalid)?))
    }
}
