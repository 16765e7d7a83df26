//! Authentication over a real WebSocket: HS256 secrets and RS256 / EdDSA keys from a
//! JWKS file are accepted; an expired, forged or garbled token gets a typed refusal;
//! the session then takes a fresh token and works. Also `--help` and `/health`.

mod common;

use common::{hs256, signed, WsClient};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn help_names_the_commands() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_keel-relay"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("serve") && help.contains("schema"), "{help}");
}

#[tokio::test]
async fn tokens_are_checked_and_refusals_are_typed() {
    let Some(f) = common::fixture().await else {
        return;
    };
    for (name, token) in [
        ("HS256", hs256("ann", 600)),
        ("RS256", signed(Algorithm::RS256, "ann", 600)),
        ("EdDSA", signed(Algorithm::EdDSA, "ann", 600)),
    ] {
        let mut client = WsClient::connect(&f.relay).await;
        let answer = client.hello(&token, "device-a").await;
        assert_eq!(answer["type"], "welcome", "{name}: {answer}");
        assert_eq!(answer["subject"], "ann");
    }

    let mut client = WsClient::connect(&f.relay).await;
    // Expired well beyond the leeway.
    let answer = client.hello(&hs256("ann", -3600), "device-a").await;
    assert_eq!(answer["type"], "refused");
    assert_eq!(answer["code"], "token_expired");
    // Signed with a secret the relay does not have.
    let forged = encode(
        &Header::new(Algorithm::HS256),
        &json!({"sub": "ann", "exp": 4_000_000_000u64}),
        &EncodingKey::from_secret(b"somebody else's secret, 32 bytes long"),
    )
    .unwrap();
    let answer = client.hello(&forged, "device-a").await;
    assert_eq!(answer["code"], "token_bad_signature", "{answer}");
    // An EdDSA token whose payload was swapped after signing.
    let good = signed(Algorithm::EdDSA, "ann", 600);
    let parts: Vec<&str> = good.split('.').collect();
    let other = signed(Algorithm::EdDSA, "bob", 600);
    let tampered = format!(
        "{}.{}.{}",
        parts[0],
        other.split('.').nth(1).unwrap(),
        parts[2]
    );
    let answer = client.hello(&tampered, "device-a").await;
    assert_eq!(answer["code"], "token_bad_signature", "{answer}");
    let answer = client.hello("not a token", "device-a").await;
    assert_eq!(answer["code"], "token_malformed", "{answer}");

    // Refused tokens leave the session unauthenticated, not closed.
    let answer = client.upload(json!([])).await;
    assert_eq!(answer["code"], "not_authenticated", "{answer}");
    let answer = client.hello(&hs256("ann", 600), "device-a").await;
    assert_eq!(answer["type"], "welcome");
    let answer = client.upload(json!([])).await;
    assert_eq!(answer["type"], "ack", "{answer}");
}

#[tokio::test]
async fn a_token_that_expires_mid_session_pauses_it_until_a_fresh_one() {
    let Some(f) = common::fixture().await else {
        return;
    };
    // `exp` is in the past but within the leeway: the session runs out 2 s from now.
    let leeway = f.config.auth.leeway_seconds as i64;
    let mut client = WsClient::connect(&f.relay).await;
    let answer = client.hello(&hs256("ann", 2 - leeway), "device-a").await;
    assert_eq!(answer["type"], "welcome", "{answer}");
    let refused = client.recv().await;
    assert_eq!(refused["type"], "refused");
    assert_eq!(refused["code"], "token_expired");
    let answer = client.upload(json!([])).await;
    assert_eq!(answer["code"], "not_authenticated", "{answer}");
    client
        .send(json!({"type": "token", "token": hs256("ann", 600)}))
        .await;
    assert_eq!(client.recv().await["type"], "welcome");
    assert_eq!(client.upload(json!([])).await["type"], "ack");
}

#[tokio::test]
async fn health_answers_ok_when_postgres_does() {
    let Some(f) = common::fixture().await else {
        return;
    };
    let mut stream = tokio::net::TcpStream::connect(f.relay.addr).await.unwrap();
    stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let body = response.split("\r\n\r\n").nth(1).unwrap();
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["status"], "ok");
    assert_eq!(body["relay_id"], "test");
}
