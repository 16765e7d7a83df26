//! Token checks: who a client is, from a JWT the app issued.
//!
//! A token is accepted when its signature verifies with one of the configured keys
//! and its claims hold: `exp` in the future (with the configured leeway), `nbf`
//! passed, `sub` present, and `iss` / `aud` equal to the configured ones when set.
//! HS256 tokens verify against the shared secrets; RS256 and EdDSA (Ed25519) tokens
//! against the public keys of a JWKS file, chosen by the token's `kid` (every key of
//! the token's algorithm when it names none). No other algorithm is accepted, so a
//! token cannot pick a weaker one than the keys were made for.
//!
//! A refused token gets a [`TokenRefusal`], which goes to the client as a typed
//! refusal frame: `token_expired` tells the client to ask the app for a new token;
//! the others mean the token will never be accepted.

use std::fmt;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{decode, decode_header, errors::ErrorKind, Algorithm, DecodingKey, Validation};

use crate::config::AuthConfig;
use crate::error::Error;

/// The verified claims of a token.
#[derive(Debug, Clone, PartialEq)]
pub struct Claims(pub serde_json::Map<String, serde_json::Value>);

impl Claims {
    /// The `sub` claim (the user), always present in accepted tokens.
    pub fn subject(&self) -> &str {
        self.0.get("sub").and_then(|v| v.as_str()).unwrap_or("")
    }

    /// A claim, by name.
    pub fn get(&self, name: &str) -> Option<&serde_json::Value> {
        self.0.get(name)
    }

    /// The `exp` claim (seconds since the epoch).
    pub fn expires_at(&self) -> Option<u64> {
        self.0.get("exp").and_then(|v| v.as_u64())
    }
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenRefusal {
    /// `exp` has passed: ask the app for a new token.
    Expired,
    /// `nbf` is still ahead.
    NotYetValid,
    /// The signature does not verify with any configured key (a forged or foreign token).
    BadSignature,
    /// The token is signed with an algorithm the relay has no key for.
    UnsupportedAlgorithm(String),
    /// The token names a key (`kid`) the JWKS file does not have.
    UnknownKey(String),
    /// `iss` differs from the configured issuer.
    WrongIssuer,
    /// `aud` does not name the configured audience.
    WrongAudience,
    /// A required claim (`exp`, `sub`) is missing.
    MissingClaim(String),
    /// Not a JWT at all (bad base64, bad JSON, wrong number of parts).
    Malformed(String),
}

impl TokenRefusal {
    /// The refusal's code on the wire.
    pub fn code(&self) -> &'static str {
        match self {
            TokenRefusal::Expired => "token_expired",
            TokenRefusal::NotYetValid => "token_not_yet_valid",
            TokenRefusal::BadSignature => "token_bad_signature",
            TokenRefusal::UnsupportedAlgorithm(_) => "token_unsupported_algorithm",
            TokenRefusal::UnknownKey(_) => "token_unknown_key",
            TokenRefusal::WrongIssuer => "token_wrong_issuer",
            TokenRefusal::WrongAudience => "token_wrong_audience",
            TokenRefusal::MissingClaim(_) => "token_missing_claim",
            TokenRefusal::Malformed(_) => "token_malformed",
        }
    }
}

impl fmt::Display for TokenRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenRefusal::Expired => write!(f, "the token has expired"),
            TokenRefusal::NotYetValid => write!(f, "the token is not valid yet (nbf)"),
            TokenRefusal::BadSignature => {
                write!(
                    f,
                    "the token's signature does not verify with any configured key"
                )
            }
            TokenRefusal::UnsupportedAlgorithm(a) => {
                write!(f, "no key is configured for the token's algorithm {a}")
            }
            TokenRefusal::UnknownKey(kid) => write!(f, "no configured key has the id {kid:?}"),
            TokenRefusal::WrongIssuer => write!(f, "the token's issuer is not the configured one"),
            TokenRefusal::WrongAudience => {
                write!(f, "the token's audience does not name this relay")
            }
            TokenRefusal::MissingClaim(c) => write!(f, "the token has no {c} claim"),
            TokenRefusal::Malformed(m) => write!(f, "not a JWT: {m}"),
        }
    }
}

/// A public key from the JWKS file.
#[derive(Clone)]
struct PublicKey {
    kid: Option<String>,
    algorithm: Algorithm,
    key: DecodingKey,
}

/// Checks tokens against the configured secrets and keys.
#[derive(Clone)]
pub struct Verifier {
    secrets: Vec<DecodingKey>,
    keys: Vec<PublicKey>,
    issuer: Option<String>,
    audience: Option<String>,
    leeway: u64,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print key material.
        f.debug_struct("Verifier")
            .field("secrets", &self.secrets.len())
            .field("keys", &self.keys.len())
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish()
    }
}

impl Verifier {
    /// Loads the secrets and the JWKS file named by the config.
    pub fn from_config(config: &AuthConfig) -> Result<Verifier, Error> {
        let jwks = match &config.jwks_file {
            None => None,
            Some(path) => Some(std::fs::read_to_string(path).map_err(|source| Error::Read {
                path: path.clone(),
                source,
            })?),
        };
        Verifier::new(config, jwks.as_deref())
    }

    /// Builds a verifier from the config and the JWKS text (if any).
    pub fn new(config: &AuthConfig, jwks: Option<&str>) -> Result<Verifier, Error> {
        let secrets = config
            .hs256_secrets
            .iter()
            .map(|s| {
                if s.len() < 32 {
                    Err(Error::Keys(
                        "an HS256 secret must be at least 32 bytes".to_owned(),
                    ))
                } else {
                    Ok(DecodingKey::from_secret(s.as_bytes()))
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut keys = Vec::new();
        if let Some(text) = jwks {
            let set: JwkSet = serde_json::from_str(text)
                .map_err(|e| Error::Keys(format!("the JWKS file is not a JWK set: {e}")))?;
            for jwk in &set.keys {
                let kid = jwk.common.key_id.clone();
                let algorithm = match &jwk.algorithm {
                    AlgorithmParameters::RSA(_) => Algorithm::RS256,
                    AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
                        Algorithm::EdDSA
                    }
                    _ => {
                        return Err(Error::Keys(format!(
                            "key {:?}: only RSA (RS256) and Ed25519 (EdDSA) keys are supported",
                            kid.unwrap_or_default()
                        )))
                    }
                };
                let key = DecodingKey::from_jwk(jwk).map_err(|e| {
                    Error::Keys(format!("key {:?}: {e}", kid.clone().unwrap_or_default()))
                })?;
                keys.push(PublicKey {
                    kid,
                    algorithm,
                    key,
                });
            }
        }
        Ok(Verifier {
            secrets,
            keys,
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            leeway: config.leeway_seconds,
        })
    }

    /// Checks a token; its claims when accepted.
    pub fn verify(&self, token: &str) -> Result<Claims, TokenRefusal> {
        let header = decode_header(token).map_err(|e| TokenRefusal::Malformed(e.to_string()))?;
        let candidates: Vec<&DecodingKey> = match header.alg {
            Algorithm::HS256 => self.secrets.iter().collect(),
            Algorithm::RS256 | Algorithm::EdDSA => self
                .keys
                .iter()
                .filter(|k| k.algorithm == header.alg)
                .filter(|k| header.kid.is_none() || k.kid == header.kid)
                .map(|k| &k.key)
                .collect(),
            other => return Err(TokenRefusal::UnsupportedAlgorithm(format!("{other:?}"))),
        };
        if candidates.is_empty() {
            let has_algorithm = self.keys.iter().any(|k| k.algorithm == header.alg);
            return Err(match header.kid {
                Some(kid) if has_algorithm => TokenRefusal::UnknownKey(kid),
                _ => TokenRefusal::UnsupportedAlgorithm(format!("{:?}", header.alg)),
            });
        }
        let mut validation = Validation::new(header.alg);
        validation.leeway = self.leeway;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "sub"]);
        match &self.issuer {
            Some(issuer) => validation.set_issuer(&[issuer]),
            None => validation.iss = None,
        }
        match &self.audience {
            Some(audience) => validation.set_audience(&[audience]),
            None => validation.validate_aud = false,
        }
        let mut refusal = TokenRefusal::BadSignature;
        for key in candidates {
            match decode::<serde_json::Map<String, serde_json::Value>>(token, key, &validation) {
                Ok(data) => {
                    if !data.claims.get("sub").is_some_and(|s| s.is_string()) {
                        return Err(TokenRefusal::MissingClaim("sub".into()));
                    }
                    return Ok(Claims(data.claims));
                }
                Err(e) => {
                    refusal = match e.kind() {
                        ErrorKind::InvalidSignature => TokenRefusal::BadSignature,
                        ErrorKind::ExpiredSignature => TokenRefusal::Expired,
                        ErrorKind::ImmatureSignature => TokenRefusal::NotYetValid,
                        ErrorKind::InvalidIssuer => TokenRefusal::WrongIssuer,
                        ErrorKind::InvalidAudience => TokenRefusal::WrongAudience,
                        ErrorKind::MissingRequiredClaim(c) => TokenRefusal::MissingClaim(c.clone()),
                        other => TokenRefusal::Malformed(format!("{other:?}")),
                    };
                    // Claims are only checked after a signature verified: a claim
                    // refusal is final, a bad signature may verify with the next key.
                    if refusal != TokenRefusal::BadSignature {
                        return Err(refusal);
                    }
                }
            }
        }
        Err(refusal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(secret: &str) -> AuthConfig {
        AuthConfig {
            hs256_secrets: vec![secret.to_owned()],
            leeway_seconds: 0,
            ..AuthConfig::default()
        }
    }

    #[test]
    fn weak_secrets_and_unusable_keys_are_refused_at_load() {
        let err = Verifier::new(&config("short"), None).unwrap_err();
        assert!(err.to_string().contains("at least 32 bytes"), "{err}");
        let secret = "x".repeat(32);
        let ec = r#"{"keys":[{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#;
        let err = Verifier::new(&config(&secret), Some(ec)).unwrap_err();
        assert!(err.to_string().contains("only RSA"), "{err}");
        let err = Verifier::new(&config(&secret), Some("{not json")).unwrap_err();
        assert!(err.to_string().contains("not a JWK set"), "{err}");
    }

    #[test]
    fn a_token_for_an_unknown_key_or_algorithm_is_refused() {
        let secret = "y".repeat(32);
        let jwks = include_str!("../tests/fixtures/jwks.json");
        let verifier = Verifier::new(&config(&secret), Some(jwks)).unwrap();
        let claims = serde_json::json!({"sub": "ann", "exp": 4_000_000_000u64});
        let mut header = jsonwebtoken::Header::new(Algorithm::HS384);
        let key = jsonwebtoken::EncodingKey::from_secret(secret.as_bytes());
        let hs384 = jsonwebtoken::encode(&header, &claims, &key).unwrap();
        assert_eq!(
            verifier.verify(&hs384).unwrap_err().code(),
            "token_unsupported_algorithm"
        );
        header.alg = Algorithm::HS256;
        let hs256 = jsonwebtoken::encode(&header, &claims, &key).unwrap();
        assert!(verifier.verify(&hs256).is_ok());
        let no_sub =
            jsonwebtoken::encode(&header, &serde_json::json!({"exp": 4_000_000_000u64}), &key)
                .unwrap();
        assert_eq!(
            verifier.verify(&no_sub).unwrap_err().code(),
            "token_missing_claim"
        );
        // A header claiming RS256 with a kid nobody has.
        let parts: Vec<&str> = hs256.split('.').collect();
        let rs_header = base64_url(r#"{"alg":"RS256","kid":"gone","typ":"JWT"}"#);
        let forged = format!("{rs_header}.{}.{}", parts[1], parts[2]);
        assert_eq!(
            verifier.verify(&forged).unwrap_err().code(),
            "token_unknown_key"
        );
    }

    fn base64_url(text: &str) -> String {
        const TABLE: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let bytes = text.as_bytes();
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n =
                chunk.iter().fold(0u32, |n, b| (n << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                out.push(TABLE[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        out
    }
}
