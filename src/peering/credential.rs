//! When a peer credential expires, read from the credential itself: the
//! `exp` claim of the bearer token in a peer Secret's kubeconfig. A
//! ServiceAccount token is a JWT; one that `peer add` issues (a
//! TokenRequest) carries `exp`, a token Secret's from an earlier release
//! does not and never expires. Nothing here verifies the token: the peer's
//! apiserver does that; this only reads when it will stop accepting it.

use data_encoding::BASE64URL_NOPAD;
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

/// The `exp` claim of `token`, when it is a JWT that has one.
pub fn token_expiry(token: &str) -> Option<Timestamp> {
    #[derive(Deserialize)]
    struct Claims {
        exp: Option<i64>,
    }
    let mut parts = token.split('.');
    let (_header, payload, _signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    // Some encoders pad base64url; the JWT form does not.
    let payload = BASE64URL_NOPAD
        .decode(payload.trim_end_matches('=').as_bytes())
        .ok()?;
    let claims: Claims = serde_json::from_slice(&payload).ok()?;
    Timestamp::from_second(claims.exp?).ok()
}

/// When the credential of a peer Secret's kubeconfig expires: its current
/// context's user's token's `exp`. `None` when the kubeconfig is not
/// usable, its user has no token, or the token never expires.
pub fn expiry(kubeconfig: &[u8]) -> Option<Timestamp> {
    let stored = super::kubeconfig::read(kubeconfig).ok()?;
    let user = stored
        .kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == stored.cluster.context)?
        .context
        .as_ref()?
        .user
        .clone()?;
    let auth = stored
        .kubeconfig
        .auth_infos
        .iter()
        .find(|a| a.name == user)?
        .auth_info
        .as_ref()?;
    use secrecy::ExposeSecret;
    token_expiry(auth.token.as_ref()?.expose_secret())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: &str) -> String {
        format!(
            "{}.{}.c2ln",
            BASE64URL_NOPAD.encode(br#"{"alg":"RS256"}"#),
            BASE64URL_NOPAD.encode(claims.as_bytes())
        )
    }

    #[test]
    fn the_exp_claim_is_when_a_token_expires() {
        assert_eq!(
            token_expiry(&jwt(
                r#"{"exp":1800000000,"sub":"system:serviceaccount:x:y"}"#
            )),
            Some(Timestamp::from_second(1_800_000_000).unwrap())
        );
        // A token Secret's token of an earlier release: no exp, no expiry.
        assert_eq!(token_expiry(&jwt(r#"{"sub":"x"}"#)), None);
        for not_a_jwt in ["", "abc", "a.b", "a.b.c.d", "a.!!!.c"] {
            assert_eq!(token_expiry(not_a_jwt), None, "{not_a_jwt}");
        }
        assert_eq!(token_expiry(&jwt("not json")), None);
        assert_eq!(token_expiry(&jwt(r#"{"exp":"soon"}"#)), None);
    }

    #[test]
    fn a_kubeconfigs_expiry_is_its_current_users_tokens() {
        let token = jwt(r#"{"exp":1800000000}"#);
        let kubeconfig = format!(
            r#"
apiVersion: v1
kind: Config
clusters:
- name: b
  cluster:
    server: https://b.example:6443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=
users:
- name: other
  user: {{token: {other}}}
- name: reader
  user: {{token: {token}}}
contexts:
- name: b
  context: {{cluster: b, user: reader}}
current-context: b
"#,
            other = jwt(r#"{"exp":1}"#),
        );
        assert_eq!(
            expiry(kubeconfig.as_bytes()),
            Some(Timestamp::from_second(1_800_000_000).unwrap())
        );
        assert_eq!(expiry(b"not a kubeconfig"), None);
    }
}
