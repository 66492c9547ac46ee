//! TLS to the source and the login plugins of the replication connection,
//! against a mariadbd started with certificates this test makes (openssl)
//! and `require_secure_transport=ON`, so that any connection sluice opens
//! without TLS is refused by the server itself.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

/// A CA, a server certificate it signed for `localhost` only, a client
/// certificate it signed, and a second CA that signed nothing of ours.
struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn make() -> Certs {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(d)
                .output()
                .expect("run openssl (scripts/test.sh installs it)");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        for ca in ["ca", "other-ca"] {
            run(&[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=sluice test {ca}"),
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.pem"),
            ]);
        }
        std::fs::write(d.join("server.ext"), "subjectAltName=DNS:localhost\n").unwrap();
        std::fs::write(d.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        for (who, cn) in [("server", "localhost"), ("client", "repl")] {
            run(&[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN={cn}"),
                "-keyout",
                &format!("{who}.key"),
                "-out",
                &format!("{who}.csr"),
            ]);
            run(&[
                "x509",
                "-req",
                "-in",
                &format!("{who}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &format!("{who}.ext"),
                "-out",
                &format!("{who}.pem"),
            ]);
        }
        Certs { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn server_args(&self) -> Vec<String> {
        vec![
            format!("--ssl-ca={}", self.path("ca.pem").display()),
            format!("--ssl-cert={}", self.path("server.pem").display()),
            format!("--ssl-key={}", self.path("server.key").display()),
            "--require-secure-transport=ON".to_owned(),
        ]
    }
}

fn tls_lines(mode: &str, ca: Option<&Path>) -> String {
    let mut s = format!("tls = \"{mode}\"\n");
    if let Some(ca) = ca {
        s.push_str(&format!("ca_file = '{}'\n", ca.display()));
    }
    s
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn tls_modes_against_a_server_that_requires_secure_transport() {
    let certs = Certs::make();
    let args = certs.server_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(db) = MariaDb::start_private(&args) else {
        return;
    };
    db.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(20));
         CREATE USER 'x509repl'@'%' IDENTIFIED BY 'x509pass' REQUIRE X509;
         GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'x509repl'@'%';",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    db.sql("INSERT INTO shop.t VALUES (1, 'one'), (2, 'two'); UPDATE shop.t SET v = 'TWO' WHERE id = 2");

    // Refused before anything is written: the lake stays empty.
    let refused = |sluice: &Sluice, wanted: &[&str]| {
        let before = manifest_paths(lake.path()).len();
        let out = sluice.run_until_caught_up();
        let text = stderr(&out);
        assert!(!out.status.success(), "sluice ran:\n{text}");
        for w in wanted {
            assert!(text.contains(w), "`{w}` in:\n{text}");
        }
        assert_eq!(
            manifest_paths(lake.path()).len(),
            before,
            "a refused run wrote a manifest"
        );
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("sluice: error:"))
                .count(),
            1,
            "one error line:\n{text}"
        );
    };

    // `disabled` against require_secure_transport: MariaDB answers "access
    // denied"; the error says that TLS may be why.
    sluice.extra_source = tls_lines("disabled", None);
    refused(&sluice, &["requires TLS", "source.tls = \"disabled\""]);

    // `verify_ca` with a CA that did not sign the server's certificate.
    sluice.extra_source = tls_lines("verify_ca", Some(&certs.path("other-ca.pem")));
    refused(&sluice, &["TLS handshake", "source.ca_file", "verify_ca"]);

    // `verify_identity` with the right CA, but source.url says 127.0.0.1
    // and the certificate names only localhost.
    sluice.extra_source = tls_lines("verify_identity", Some(&certs.path("ca.pem")));
    refused(&sluice, &["TLS handshake", "verify_identity"]);

    // `verify_ca` checks the chain, not the name: it runs.
    sluice.extra_source = tls_lines("verify_ca", Some(&certs.path("ca.pem")));
    sluice.run_until_caught_up_ok();
    let expected = db.table_map("SELECT id, v FROM shop.t", &[0]);
    let rows = Lake::read(lake.path()).rows("shop.t");
    assert_eq!(rows.len(), 3, "two inserts and an update");
    assert_same_table("shop.t over verify_ca", &expected, &replay(&rows, &[0]));

    // `verify_identity` with the name the certificate carries.
    db.sql("INSERT INTO shop.t VALUES (3, 'three')");
    sluice.url = sluice.url.replace("127.0.0.1", "localhost");
    sluice.extra_source = tls_lines("verify_identity", Some(&certs.path("ca.pem")));
    let check = sluice.run_args(&["check"], &[]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    sluice.run_until_caught_up_ok();

    // `required`: encrypted, certificate unchecked.
    db.sql("DELETE FROM shop.t WHERE id = 1");
    sluice.extra_source = tls_lines("required", None);
    sluice.run_until_caught_up_ok();

    // A user created REQUIRE X509 logs in with a client certificate only.
    db.sql("INSERT INTO shop.t VALUES (4, 'four')");
    sluice.url = sluice.url.replace("repl@", "x509repl@");
    sluice.password = "x509pass".into();
    sluice.extra_source = tls_lines("verify_ca", Some(&certs.path("ca.pem")));
    refused(&sluice, &["authentication failed", "x509repl"]);
    sluice.extra_source.push_str(&format!(
        "cert_file = '{}'\nkey_file = '{}'\n",
        certs.path("client.pem").display(),
        certs.path("client.key").display()
    ));
    sluice.run_until_caught_up_ok();

    let expected = db.table_map("SELECT id, v FROM shop.t", &[0]);
    let rows = Lake::read(lake.path()).rows("shop.t");
    assert_eq!(rows.len(), 6);
    assert_same_table("shop.t over TLS", &expected, &replay(&rows, &[0]));
}

#[test]
fn ed25519_users_replicate() {
    let Some(db) = MariaDb::start_private(&[]) else {
        return;
    };
    db.sql(
        "INSTALL SONAME 'auth_ed25519';
         CREATE USER 'edrepl'@'%' IDENTIFIED VIA ed25519 USING PASSWORD('edpass');
         GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'edrepl'@'%';
         CREATE DATABASE shop;
         CREATE TABLE shop.t (id INT PRIMARY KEY, v TEXT);",
    );
    let lake = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut sluice = Sluice::new(&db, lake.path(), state.path());
    sluice.url = sluice.url.replace("repl@", "edrepl@");
    db.sql("INSERT INTO shop.t VALUES (1, 'signed'), (2, 'not sent')");

    sluice.password = "wrong".into();
    let out = sluice.run_until_caught_up();
    assert!(!out.status.success());
    let text = stderr(&out);
    assert!(
        text.contains("authentication failed for user `edrepl`"),
        "{text}"
    );

    sluice.password = "edpass".into();
    sluice.run_until_caught_up_ok();
    let rows = Lake::read(lake.path()).rows("shop.t");
    let expected = db.table_map("SELECT id, v FROM shop.t", &[0]);
    assert_eq!(rows.len(), 2);
    assert_same_table("shop.t as an ed25519 user", &expected, &replay(&rows, &[0]));
}
