//! The login of our own replication connection, as a state machine over
//! the server's packets, so every path is tested with byte vectors:
//! `mysql_native_password`, MariaDB's `client_ed25519`, MySQL's
//! `caching_sha2_password` (fast path; full authentication with the
//! password over TLS, or encrypted with the server's RSA key without TLS),
//! and `mysql_clear_password` over TLS only. The scrambles themselves come
//! from mysql_common ([`AuthPlugin::gen_data`]).

use mysql_common::io::ParseBuf;
use mysql_common::packets::{AuthPlugin, AuthSwitchRequest};
use mysql_common::proto::MySerialize;

use crate::config::PASSWORD_ENV;
use crate::error::{Error, Result};

/// What the connection does next.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Write this packet (continuing the sequence), then read the answer.
    Send(Vec<u8>),
    /// Read the next packet.
    Read,
    /// Logged in.
    Done,
}

/// `caching_sha2_password`'s AuthMoreData statuses.
const FAST_AUTH_OK: u8 = 0x03;
const FULL_AUTH: u8 = 0x04;
/// The client's request for the server's RSA public key.
const REQUEST_PUBLIC_KEY: u8 = 0x02;

pub struct Login<'a> {
    user: &'a str,
    password: Option<&'a str>,
    /// The connection is encrypted (TLS): the password may go as it is.
    secure: bool,
    plugin: AuthPlugin<'static>,
    nonce: Vec<u8>,
    switched: bool,
    /// The RSA public key was asked for: the next AuthMoreData holds it.
    asked_key: bool,
}

/// The bytes of MariaDB's ed25519 nonce.
const ED25519_NONCE: usize = 32;

impl<'a> Login<'a> {
    /// The login with the plugin the greeting named and its nonce.
    pub fn new(
        user: &'a str,
        password: Option<&'a str>,
        secure: bool,
        advertised: Option<AuthPlugin<'_>>,
        nonce: &[u8],
    ) -> Self {
        Login {
            user,
            password,
            secure,
            plugin: first_plugin(advertised),
            nonce: nonce.to_vec(),
            switched: false,
            asked_key: false,
        }
    }

    /// The plugin the handshake response names.
    pub fn plugin(&self) -> &AuthPlugin<'static> {
        &self.plugin
    }

    /// The scramble of the handshake response.
    pub fn first_answer(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some(d) = self.plugin.gen_data(self.password, &self.nonce) {
            d.serialize(&mut out);
        }
        out
    }

    /// The step after a packet of the server other than an ERR packet
    /// (which the caller turns into its error).
    pub fn next(&mut self, packet: &[u8]) -> Result<Step> {
        match packet.first() {
            Some(0x00) => Ok(Step::Done),
            Some(0xFE) if !self.switched => {
                self.switched = true;
                self.switch(packet).map(Step::Send)
            }
            Some(0x01) if self.plugin == AuthPlugin::CachingSha2Password => {
                self.more_data(&packet[1..])
            }
            _ => Err(unexpected(self.user, &self.plugin)),
        }
    }

    /// An auth switch request: 0xFE, the plugin name, its data.
    fn switch(&mut self, packet: &[u8]) -> Result<Vec<u8>> {
        let switch: AuthSwitchRequest<'_> = ParseBuf(packet)
            .parse(())
            .map_err(|e| Error::Connection(format!("bad auth switch request: {e}")))?;
        self.plugin = switch.auth_plugin().clone().into_owned();
        // `plugin_data()` already drops one trailing NUL (the terminator
        // after a native scramble). ed25519's nonce is 32 random bytes with
        // no terminator, so a nonce that ends in 0 lost its last byte there
        // (the login then failed); take it whole from the packet instead.
        let raw = packet
            .iter()
            .skip(1)
            .position(|b| *b == 0)
            .map_or(&[][..], |nul| &packet[nul + 2..]);
        self.nonce = match &self.plugin {
            AuthPlugin::Ed25519 if raw.len() >= ED25519_NONCE => raw[..ED25519_NONCE].to_vec(),
            _ => switch.plugin_data().to_vec(),
        };
        match &self.plugin {
            AuthPlugin::MysqlNativePassword
            | AuthPlugin::CachingSha2Password
            | AuthPlugin::Ed25519 => Ok(self.first_answer()),
            AuthPlugin::MysqlClearPassword if self.secure => Ok(self.clear_password()),
            AuthPlugin::MysqlClearPassword => Err(Error::Preflight(format!(
                "the server asks user `{}` to log in with mysql_clear_password, which would send the password in plain text over an unencrypted connection; sluice refuses it: set source.tls = \"required\" (or stricter) so the password travels encrypted, or give the user another plugin",
                self.user
            ))),
            other => Err(unsupported_plugin(self.user, other)),
        }
    }

    /// `caching_sha2_password`'s AuthMoreData (after the 0x01).
    fn more_data(&mut self, data: &[u8]) -> Result<Step> {
        if self.asked_key {
            // The server's RSA public key (PEM).
            return self.encrypted_password(data).map(Step::Send);
        }
        match data {
            // The server had the password's hash cached: OK follows.
            [FAST_AUTH_OK] => Ok(Step::Read),
            [FULL_AUTH] if self.secure => Ok(Step::Send(self.clear_password())),
            [FULL_AUTH] => {
                self.asked_key = true;
                Ok(Step::Send(vec![REQUEST_PUBLIC_KEY]))
            }
            _ => Err(unexpected(self.user, &self.plugin)),
        }
    }

    /// The password and a NUL, as sent over TLS.
    fn clear_password(&self) -> Vec<u8> {
        let mut out = self.password.unwrap_or("").as_bytes().to_vec();
        out.push(0);
        out
    }

    /// The password and a NUL, XORed with the nonce and encrypted with the
    /// server's RSA key (OAEP), as sent without TLS.
    fn encrypted_password(&self, pem: &[u8]) -> Result<Vec<u8>> {
        let mut plain = self.clear_password();
        if !self.nonce.is_empty() {
            for (i, b) in plain.iter_mut().enumerate() {
                *b ^= self.nonce[i % self.nonce.len()];
            }
        }
        let bad_key = || {
            Error::Preflight(format!(
                "the server sent an RSA public key that cannot be read for user `{}`'s caching_sha2_password login; set source.tls = \"required\" so the password travels over TLS instead",
                self.user
            ))
        };
        if !pem.starts_with(b"-----BEGIN ") {
            return Err(bad_key());
        }
        // mysql_common panics on a malformed key; a server's bytes must not
        // bring the process down.
        std::panic::catch_unwind(|| mysql_common::crypto::encrypt(&plain, pem))
            .map_err(|_| bad_key())
    }
}

/// The plugin of the first login answer. A greeting that names
/// `mysql_clear_password` (a server whose default is a PAM setup) gets a
/// native-password scramble instead: the password must never go out before
/// the server says that it wants it, and a server that needs another plugin
/// asks with an auth switch.
fn first_plugin(advertised: Option<AuthPlugin<'_>>) -> AuthPlugin<'static> {
    match advertised.map(|p| p.into_owned()) {
        None | Some(AuthPlugin::MysqlClearPassword) => AuthPlugin::MysqlNativePassword,
        Some(plugin) => plugin,
    }
}

fn unsupported_plugin(user: &str, plugin: &AuthPlugin<'_>) -> Error {
    Error::Preflight(format!(
        "user `{user}` authenticates with {}, which sluice's replication connection does not speak; use mysql_native_password, ed25519 or caching_sha2_password for the sluice user",
        String::from_utf8_lossy(plugin.as_bytes())
    ))
}

fn unexpected(user: &str, plugin: &AuthPlugin<'_>) -> Error {
    Error::Preflight(format!(
        "the server answered user `{user}`'s {} login with a packet sluice does not understand; check the user's plugin (and the password in {PASSWORD_ENV} or source.password_file)",
        String::from_utf8_lossy(plugin.as_bytes())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    /// An auth switch request as the server sends it: 0xFE, the plugin name
    /// and a NUL, then the plugin's data.
    fn switch_request(plugin: &str, data: &[u8]) -> Vec<u8> {
        let mut p = vec![0xFE];
        p.extend_from_slice(plugin.as_bytes());
        p.push(0);
        p.extend_from_slice(data);
        p
    }

    fn nonce() -> Vec<u8> {
        (1u8..=20).collect()
    }

    fn login(secure: bool, plugin: AuthPlugin<'_>) -> Login<'static> {
        Login::new("repl", Some("s3cret"), secure, Some(plugin), &nonce())
    }

    #[test]
    fn clear_password_is_refused_without_tls_and_sent_with_it() {
        for data in [&b""[..], b"\0"] {
            let packet = switch_request("mysql_clear_password", data);
            let mut l = login(false, AuthPlugin::MysqlNativePassword);
            let err = l.next(&packet).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, Error::Preflight(_)), "{text}");
            assert!(text.contains("mysql_clear_password"), "{text}");
            assert!(text.contains("plain text"), "{text}");
            assert!(text.contains("`repl`"), "{text}");
            assert!(!text.contains("s3cret"), "{text}");
            let mut l = login(true, AuthPlugin::MysqlNativePassword);
            assert_eq!(l.next(&packet).unwrap(), Step::Send(b"s3cret\0".to_vec()));
        }
    }

    #[test]
    fn native_password_switch_is_answered_with_a_scramble() {
        let mut data = nonce();
        data.push(0);
        let packet = switch_request("mysql_native_password", &data);
        let Step::Send(answer) = login(false, AuthPlugin::CachingSha2Password)
            .next(&packet)
            .unwrap()
        else {
            panic!("no answer")
        };
        // SHA1(password) XOR SHA1(nonce + SHA1(SHA1(password))): 20 bytes,
        // never the password, and different for another nonce.
        assert_eq!(answer.len(), 20);
        assert!(!answer.windows(6).any(|w| w == b"s3cret"));
        let other = switch_request("mysql_native_password", &[7u8; 20]);
        assert_ne!(
            login(false, AuthPlugin::MysqlNativePassword)
                .next(&other)
                .unwrap(),
            Step::Send(answer)
        );
        // No password: an empty answer.
        let mut l = Login::new("repl", None, false, None, &nonce());
        assert_eq!(l.next(&packet).unwrap(), Step::Send(Vec::new()));
        // A second switch is not answered.
        assert!(l.next(&packet).is_err());
    }

    #[test]
    fn ed25519_switch_is_answered_with_a_signature() {
        let server_nonce = [9u8; 32];
        let packet = switch_request("client_ed25519", &server_nonce);
        let Step::Send(sig) = login(false, AuthPlugin::MysqlNativePassword)
            .next(&packet)
            .unwrap()
        else {
            panic!("no answer")
        };
        // An Ed25519 signature of the nonce: 64 bytes, deterministic for the
        // password and the nonce, different for another password.
        assert_eq!(sig.len(), 64);
        assert_eq!(
            login(true, AuthPlugin::MysqlNativePassword)
                .next(&packet)
                .unwrap(),
            Step::Send(sig.clone())
        );
        let mut other = Login::new("repl", Some("other"), false, None, &nonce());
        assert_ne!(other.next(&packet).unwrap(), Step::Send(sig));
    }

    /// MySQL's caching_sha2_password scramble:
    /// SHA256(password) XOR SHA256(SHA256(SHA256(password)) + nonce).
    fn sha2_scramble(password: &[u8], nonce: &[u8]) -> Vec<u8> {
        let p1 = Sha256::digest(password);
        let p2 = Sha256::digest(p1);
        let mut h = Sha256::new();
        h.update(p2);
        h.update(nonce);
        let p3 = h.finalize();
        p1.iter().zip(p3.iter()).map(|(a, b)| a ^ b).collect()
    }

    #[test]
    fn caching_sha2_fast_path() {
        let mut l = login(false, AuthPlugin::CachingSha2Password);
        assert_eq!(l.plugin(), &AuthPlugin::CachingSha2Password);
        assert_eq!(l.first_answer(), sha2_scramble(b"s3cret", &nonce()));
        // AuthMoreData "fast auth success", then OK.
        assert_eq!(l.next(&[0x01, 0x03]).unwrap(), Step::Read);
        assert_eq!(l.next(&[0x00, 0, 0, 2, 0, 0, 0]).unwrap(), Step::Done);
    }

    #[test]
    fn caching_sha2_full_auth_over_tls_sends_the_password() {
        let mut l = login(true, AuthPlugin::CachingSha2Password);
        assert_eq!(
            l.next(&[0x01, 0x04]).unwrap(),
            Step::Send(b"s3cret\0".to_vec())
        );
        assert_eq!(l.next(&[0x00, 0, 0, 2, 0, 0, 0]).unwrap(), Step::Done);
    }

    #[test]
    fn caching_sha2_full_auth_without_tls_uses_the_servers_rsa_key() {
        let mut l = login(false, AuthPlugin::CachingSha2Password);
        // Full authentication: ask for the public key, never the password.
        assert_eq!(
            l.next(&[0x01, 0x04]).unwrap(),
            Step::Send(vec![REQUEST_PUBLIC_KEY])
        );
        let mut key = vec![0x01];
        key.extend_from_slice(TEST_PUBLIC_KEY.as_bytes());
        let Step::Send(sealed) = l.next(&key).unwrap() else {
            panic!("no answer")
        };
        // One RSA-2048 block that the key's owner opens to the password
        // and a NUL, XORed with the nonce; OAEP is randomized, so two
        // encryptions differ.
        assert_eq!(sealed.len(), 256);
        let opened: Vec<u8> = server_decrypts(&sealed)
            .iter()
            .zip(nonce().iter().cycle())
            .map(|(b, n)| b ^ n)
            .collect();
        assert_eq!(opened, b"s3cret\0");
        let mut again = login(false, AuthPlugin::CachingSha2Password);
        again.next(&[0x01, 0x04]).unwrap();
        assert_ne!(again.next(&key).unwrap(), Step::Send(sealed));
        assert_eq!(l.next(&[0x00, 0, 0, 2, 0, 0, 0]).unwrap(), Step::Done);
    }

    #[test]
    fn a_malformed_rsa_key_is_an_error_not_a_panic() {
        for key in [&b"\x01garbage"[..], b"\x01-----BEGIN PUBLIC KEY-----\nzz\n"] {
            let mut l = login(false, AuthPlugin::CachingSha2Password);
            l.next(&[0x01, 0x04]).unwrap();
            let err = l.next(key).unwrap_err().to_string();
            assert!(err.contains("RSA public key"), "{err}");
            assert!(err.contains("source.tls"), "{err}");
        }
    }

    #[test]
    fn unknown_packets_and_plugins_are_refused() {
        let mut l = login(false, AuthPlugin::MysqlNativePassword);
        let err = l.next(&switch_request("dialog", b"")).unwrap_err();
        assert!(err.to_string().contains("dialog"), "{err}");
        let mut l = login(false, AuthPlugin::MysqlNativePassword);
        assert!(l.next(&[0x01, 0x04]).is_err());
        assert!(l.next(&[0xFE]).is_err());
        let mut l = login(false, AuthPlugin::CachingSha2Password);
        assert!(l.next(&[0x01, 0x07]).is_err());
    }

    #[test]
    fn a_clear_password_greeting_gets_a_native_scramble() {
        assert_eq!(
            first_plugin(Some(AuthPlugin::MysqlClearPassword)),
            AuthPlugin::MysqlNativePassword
        );
        assert_eq!(first_plugin(None), AuthPlugin::MysqlNativePassword);
        assert_eq!(
            first_plugin(Some(AuthPlugin::CachingSha2Password)),
            AuthPlugin::CachingSha2Password
        );
    }

    /// A 2048-bit RSA key pair made for these tests (`openssl genrsa 2048`,
    /// `openssl rsa -pubout`).
    const TEST_PUBLIC_KEY: &str = include_str!("../../tests/data/rsa/public.pem");
    const TEST_PRIVATE_KEY: &str =
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/rsa/private.pem");

    /// Decrypts with the private key as the server does (OAEP, SHA-1), by
    /// the openssl command rather than our own code.
    fn server_decrypts(sealed: &[u8]) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("sealed");
        std::fs::write(&input, sealed).unwrap();
        let out = std::process::Command::new("openssl")
            .args([
                "pkeyutl",
                "-decrypt",
                "-pkeyopt",
                "rsa_padding_mode:oaep",
                "-inkey",
            ])
            .arg(TEST_PRIVATE_KEY)
            .arg("-in")
            .arg(&input)
            .output()
            .expect("run openssl (scripts/test.sh installs it)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }
}
