//! Connections that carry a person's sign-in (see `cem_signin`): which
//! credential a tenant's connection uses, and the sign-in an upstream's
//! `401` (or `403 insufficient_scope`) asks for.

use std::error::Error;

use rmcp::transport::streamable_http_client::{
    AuthRequiredError, InsufficientScopeError, StreamableHttpError,
};

use rmcp::transport::auth::AuthError;

use crate::sse::SseError;

/// A Bearer challenge an upstream answered with.
#[derive(Debug, Clone)]
pub(crate) struct Challenge {
    /// Its `WWW-Authenticate`, when the error kept it.
    pub header: Option<String>,
    /// A `403 insufficient_scope`: signed in, but with too little.
    pub step_up: bool,
    /// Why a sign-in held is no good any more, when that is the cause.
    pub ended: Option<&'static str>,
}

/// The sign-in `e` (or what it was caused by) asks for, if any.
pub(crate) fn challenge_in(e: &(dyn Error + 'static)) -> Option<Challenge> {
    let mut at = Some(e);
    while let Some(err) = at {
        if let Some(http) = err.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            match http {
                StreamableHttpError::AuthRequired(a) => {
                    return Some(Challenge {
                        header: Some(a.www_authenticate_header.clone()),
                        step_up: false,
                        ended: None,
                    });
                }
                StreamableHttpError::InsufficientScope(i) => {
                    return Some(Challenge {
                        header: Some(i.www_authenticate_header.clone()),
                        step_up: true,
                        ended: None,
                    });
                }
                _ => {}
            }
        }
        // A failed send or handshake names no source (rmcp's errors):
        // the transport's error is inside it.
        if let Some(rmcp::service::ServiceError::TransportSend(t)) =
            err.downcast_ref::<rmcp::service::ServiceError>()
        {
            at = Some(t.error.as_ref());
            continue;
        }
        if let Some(rmcp::service::ClientInitializeError::TransportError { error: t, .. }) =
            err.downcast_ref::<rmcp::service::ClientInitializeError>()
        {
            at = Some(t.error.as_ref());
            continue;
        }
        if let Some(t) = err.downcast_ref::<rmcp::transport::DynamicTransportError>() {
            at = Some(t.error.as_ref());
            continue;
        }
        // Behind a boxed error (rmcp's DynamicTransportError, what a
        // call's failure carries) the chain skips the transport's error
        // and goes on with its source: the challenge itself.
        if let Some(a) = err.downcast_ref::<AuthRequiredError>() {
            return Some(Challenge {
                header: Some(a.www_authenticate_header.clone()),
                step_up: false,
                ended: None,
            });
        }
        if let Some(i) = err.downcast_ref::<InsufficientScopeError>() {
            return Some(Challenge {
                header: Some(i.www_authenticate_header.clone()),
                step_up: true,
                ended: None,
            });
        }
        if let Some(ended) = err.downcast_ref::<AuthError>().and_then(ended_by) {
            return Some(Challenge {
                header: None,
                step_up: false,
                ended: Some(ended),
            });
        }
        if let Some(SseError::Challenge {
            status,
            www_authenticate,
            ..
        }) = err.downcast_ref::<SseError>()
        {
            return Some(Challenge {
                header: Some(www_authenticate.clone()),
                step_up: *status == 403,
                ended: None,
            });
        }
        at = err.source();
    }
    // Some of rmcp's paths keep only the words.
    let text = e.to_string();
    (text.contains("Auth required") || text.contains("authorization required")).then_some(
        Challenge {
            header: None,
            step_up: false,
            ended: None,
        },
    )
}

/// Why a renewal that failed with `e` means the person must sign in
/// again, if it does. rmcp reads only `invalid_grant` as final; a client
/// the authorization server no longer knows (`invalid_client`,
/// `unauthorized_client`: its registration was dropped) is as final, and
/// retrying would fail the same way on every call.
pub(crate) fn ended_by(e: &AuthError) -> Option<&'static str> {
    match e {
        AuthError::AuthorizationRequired => {
            Some("the sign-in held has ended: no refresh token, or its renewal was refused")
        }
        AuthError::TokenRefreshRejected(_) => {
            Some("its authorization server refused to renew the sign-in")
        }
        AuthError::TokenRefreshFailed(why)
            if why.contains("invalid_client") || why.contains("unauthorized_client") =>
        {
            Some("its authorization server no longer knows this server as a client")
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::transport::streamable_http_client::AuthRequiredError;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Box<dyn Error + Send + Sync>);

    #[test]
    fn a_challenge_is_found_however_deep() {
        let inner: StreamableHttpError<reqwest::Error> = StreamableHttpError::AuthRequired(
            AuthRequiredError::new(r#"Bearer resource_metadata="http://x/.well-known""#.into()),
        );
        let outer = Outer(Box::new(inner));
        let found = challenge_in(&outer);
        assert!(found.as_ref().is_some_and(|c| {
            !c.step_up
                && c.header
                    .as_deref()
                    .is_some_and(|h| h.contains("resource_metadata"))
        }));
        let plain = Outer("connection refused".into());
        assert!(challenge_in(&plain).is_none());
    }

    #[test]
    fn a_403_of_a_call_is_found_behind_the_transport_s_boxed_error() {
        // What a tools/call that the server refused for scope returns.
        let inner: StreamableHttpError<reqwest::Error> =
            StreamableHttpError::InsufficientScope(InsufficientScopeError::new(
                r#"Bearer error="insufficient_scope", scope="orders:write""#.into(),
                Some("orders:write".into()),
            ));
        let transport = rmcp::transport::DynamicTransportError::from_parts(
            "streamable-http",
            std::any::TypeId::of::<()>(),
            Box::new(inner),
        );
        let e = rmcp::service::ServiceError::TransportSend(transport);
        let found = challenge_in(&e);
        assert!(found.as_ref().is_some_and(|c| {
            c.step_up
                && c.header
                    .as_deref()
                    .is_some_and(|h| h.contains("orders:write"))
        }));
    }

    fn handshake_failing_with(e: AuthError) -> rmcp::service::ClientInitializeError {
        let inner: StreamableHttpError<reqwest::Error> = StreamableHttpError::Auth(e);
        rmcp::service::ClientInitializeError::TransportError {
            error: rmcp::transport::DynamicTransportError::from_parts(
                "streamable-http",
                std::any::TypeId::of::<()>(),
                Box::new(inner),
            ),
            context: "send initialize request".into(),
        }
    }

    #[test]
    fn a_renewal_the_provider_refuses_for_good_asks_for_sign_in_again() {
        let final_ones = [
            AuthError::TokenRefreshRejected("invalid_grant".into()),
            AuthError::TokenRefreshFailed(
                "Server returned error response: invalid_client: client authentication failed"
                    .into(),
            ),
            AuthError::AuthorizationRequired,
        ];
        for e in final_ones {
            let what = e.to_string();
            let found = challenge_in(&handshake_failing_with(e));
            assert!(
                found
                    .as_ref()
                    .is_some_and(|c| c.ended.is_some() && !c.step_up),
                "{what}: {found:?}"
            );
        }
        // A provider down for a moment is no reason to ask anyone.
        let transient =
            AuthError::TokenRefreshFailed("error sending request: connection refused".into());
        assert!(challenge_in(&handshake_failing_with(transient)).is_none());
    }
}
