//! A throwaway certificate authority for the TLS tests, made with the real `openssl`.

use std::path::PathBuf;
use std::process::Command;

use super::base::tempdir;

/// `openssl`, or a panic that says how to install it. Never a silent skip.
pub fn openssl_bin() -> PathBuf {
    for dir in std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/bin", "/usr/local/bin"])
    {
        let p = PathBuf::from(dir).join("openssl");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "openssl not found on PATH: the TLS tests generate their certificates with it. \
         Install it with `sudo apt-get install -y openssl` (or run ./scripts/test.sh, which does)"
    );
}

/// Certificates for TLS tests, made with the `openssl` CLI in a temporary directory:
/// - `ca.crt`/`ca.key`: the CA the servers and the client certificate are signed by;
/// - `server.crt`/`server.key`: for DNS names `localhost` and `redis.test` only (no IP address,
///   so `rediss://127.0.0.1` fails verification unless `redis.tls.serverName` names one);
/// - `client.crt`/`client.key`: a client certificate (extendedKeyUsage clientAuth);
/// - `other-ca.crt`: an unrelated CA (the "wrong CA").
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempdir();
        let run = |args: &[&str]| {
            let out = Command::new(openssl_bin())
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("run openssl");
            assert!(
                out.status.success(),
                "openssl {args:?} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for (name, cn) in [("ca", "redlock-test-ca"), ("other-ca", "some-other-ca")] {
            let (key, crt, subj) = (
                format!("{name}.key"),
                format!("{name}.crt"),
                format!("/CN={cn}"),
            );
            let mut args = vec!["req", "-x509"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &crt, "-days", "2", "-subj", &subj]);
            run(&args);
        }
        std::fs::write(
            dir.path().join("server.ext"),
            "subjectAltName=DNS:localhost,DNS:redis.test\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("client.ext"),
            "extendedKeyUsage=clientAuth\n",
        )
        .unwrap();
        for name in ["server", "client"] {
            let (key, csr, crt, ext) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.crt"),
                format!("{name}.ext"),
            );
            let subj = format!("/CN={name}");
            let mut args = vec!["req"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
            run(&args);
            run(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "2",
                "-extfile",
                &ext,
            ]);
        }
        Pki { dir }
    }

    /// A file of this PKI.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The same as a `&str` for command lines.
    pub fn arg(&self, name: &str) -> String {
        self.path(name).to_str().unwrap().to_string()
    }
}
