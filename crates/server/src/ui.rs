//! The trace viewer: `GET /` on the HTTP address of a node and of the query
//! tier serves a page that searches and shows traces, and charts TraceQL
//! metrics per service, through the Tempo API beside it
//! (`tracedb_query::tempo`), read-only.
//!
//! The page is hand-written HTML, CSS and JavaScript modules in
//! `crates/server/ui/`, compiled into the binary with `include_bytes!`: no
//! JavaScript toolchain in the build, nothing fetched at run time, so it works
//! where tracedb runs without internet access. The one library it uses,
//! uPlot for the metrics view's charts, is vendored as its package ships it
//! (`ui/vendor/`, with its licence, served beside it). Every answer carries:
//! - a Content-Security-Policy that allows scripts, styles and requests only
//!   from this origin and no inline script or style at all, so span data that
//!   holds markup can run nothing even if it reached the document as HTML (the
//!   page only ever writes it as text);
//! - `X-Content-Type-Options: nosniff`, so each asset is only ever what its
//!   content type says;
//! - an `ETag`, the FNV-1a hash of the asset computed at compile time, with
//!   `Cache-Control: no-cache`: a browser revalidates on each load and gets a
//!   `304` until the binary changes, so an upgrade is never hidden by a cache.
//!
//! The page uses relative URLs only (`ui/app.js`, `api/search`), so it works
//! unchanged over TLS and mutual TLS (it is served by the same listener as the
//! API) and behind a proxy that mounts tracedb under a path.

use axum::{
    extract::Path,
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Router,
};

/// What the page may load: its own scripts, styles and API, nothing inline,
/// no plugins, no framing, no form posts.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
form-action 'none'; frame-ancestors 'none'";

/// One embedded file.
pub struct Asset {
    /// Its name under `/ui/` (the page itself is `index.html`, served at `/`).
    pub name: &'static str,
    pub content_type: &'static str,
    pub bytes: &'static [u8],
    /// A quoted strong ETag: the bytes' FNV-1a hash, in hex.
    etag: &'static str,
}

macro_rules! asset {
    ($name:literal, $type:expr) => {{
        const BYTES: &[u8] = include_bytes!(concat!("../ui/", $name));
        const HASH: [u8; 18] = etag_of(BYTES);
        Asset {
            name: $name,
            content_type: $type,
            bytes: BYTES,
            etag: match std::str::from_utf8(&HASH) {
                Ok(s) => s,
                Err(_) => panic!("an ETag is ASCII"),
            },
        }
    }};
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the page.
pub const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("format.js", JS),
    asset!("search.js", JS),
    asset!("range.js", JS),
    asset!("complete.js", JS),
    asset!("trace.js", JS),
    asset!("model.js", JS),
    asset!("waterfall.js", JS),
    asset!("details.js", JS),
    asset!("metrics.js", JS),
    asset!("chart.js", JS),
    // Vendored, unchanged: see `ui/vendor/README.md` for their versions.
    asset!("vendor/uPlot.iife.min.js", JS),
    asset!("vendor/uPlot.min.css", "text/css; charset=utf-8"),
    asset!("vendor/uPlot.LICENSE.txt", "text/plain; charset=utf-8"),
];

/// `"` + 16 hex digits of the 64-bit FNV-1a hash of `bytes` + `"`.
const fn etag_of(bytes: &[u8]) -> [u8; 18] {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    let digits = b"0123456789abcdef";
    let mut out = [b'"'; 18];
    let mut d = 0;
    while d < 16 {
        out[1 + d] = digits[((hash >> (60 - 4 * d)) & 0xf) as usize];
        d += 1;
    }
    out
}

/// `GET /` (the page) and `GET /ui/{file}` (its scripts, style and icon, and
/// `ui/vendor/` the libraries it vendors).
pub fn router() -> Router {
    Router::new()
        .route("/", get(|headers: HeaderMap| async move { serve("index.html", &headers) }))
        .route(
            "/ui/{*file}",
            get(|Path(file): Path<String>, headers: HeaderMap| async move {
                serve(&file, &headers)
            }),
        )
}

fn serve(name: &str, request: &HeaderMap) -> Response {
    let Some(asset) = ASSETS.iter().find(|a| a.name == name) else {
        return (StatusCode::NOT_FOUND, "no such file of the trace viewer\n").into_response();
    };
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| {
            tags.split(',')
                .any(|t| t.trim() == asset.etag || t.trim() == "*")
        });
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut r = asset.bytes.into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        );
        r
    };
    let headers = response.headers_mut();
    headers.insert(header::ETAG, HeaderValue::from_static(asset.etag));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_differ_by_content_and_are_quoted_hex() {
        let a = etag_of(b"a");
        let b = etag_of(b"b");
        assert_ne!(a, b);
        assert_eq!((a[0], a[17]), (b'"', b'"'));
        assert!(a[1..17].iter().all(u8::is_ascii_hexdigit));
        // FNV-1a 64 of "a", a published test vector.
        assert_eq!(&a, b"\"af63dc4c8601ec8c\"");
    }

    #[test]
    fn the_assets_stay_small() {
        let total: usize = ASSETS.iter().map(|a| a.bytes.len()).sum();
        assert!(total <= 300 * 1024, "the viewer's assets are {total} bytes");
        let mut names: Vec<&str> = ASSETS.iter().map(|a| a.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ASSETS.len(), "asset names are unique");
    }
}
