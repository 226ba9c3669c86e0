//! TLS settings of one endpoint: roots (`caFile` or the web PKI), the client certificate, the
//! name to verify (`serverName`), and the test-only `insecureSkipVerify`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use super::Tls;
use crate::config::{Endpoint, RedisConfig};

/// Why the TLS settings of an endpoint could not be built from the config's files. Each names
/// the setting and the file; none carries a key's bytes.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The crypto provider refused the protocol versions.
    #[error("TLS setup: {0}")]
    Setup(rustls::Error),
    /// A file could not be read.
    #[error("{setting}: cannot read {}: {source}", .path.display())]
    Unreadable {
        /// `redis.tls.caFile` or `redis.tls.certFile`.
        setting: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The CA file is not PEM.
    #[error("redis.tls.caFile: {} is not PEM certificates: {source}", .path.display())]
    CaNotPem {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: rustls::pki_types::pem::Error,
    },
    /// A CA certificate was refused as a root.
    #[error("redis.tls.caFile: {}: {source}", .path.display())]
    CaRejected {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rustls::Error,
    },
    /// The client certificate file is not PEM.
    #[error("redis.tls.certFile: {}: {source}", .path.display())]
    CertNotPem {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: rustls::pki_types::pem::Error,
    },
    /// A certificate file holds no certificate.
    #[error("{setting}: {} holds no PEM certificate", .path.display())]
    NoCertificate {
        /// `redis.tls.caFile` or `redis.tls.certFile`.
        setting: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The key file is unreadable or not a PEM private key (its bytes never appear here).
    #[error("redis.tls.keyFile: {} is not a readable PEM private key", .path.display())]
    BadKey {
        /// The file.
        path: PathBuf,
    },
    /// The certificate and key do not make a client identity.
    #[error("redis.tls.certFile/keyFile: {0}")]
    ClientAuth(rustls::Error),
    /// The name to verify is not a DNS name or IP address.
    #[error("{endpoint}: {name:?} is not a valid TLS server name")]
    ServerName {
        /// The endpoint's `host:port`.
        endpoint: String,
        /// `redis.tls.serverName` or the URL's host.
        name: String,
    },
}

pub(super) fn tls_settings(endpoint: &Endpoint, redis: &RedisConfig) -> Result<Tls, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Setup)?;
    let builder = if redis.tls_insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
    } else {
        let roots = match &redis.tls_ca_file {
            Some(ca) => ca_roots(ca)?,
            // Managed Redis with certificates from a public CA.
            None => webpki_roots::TLS_SERVER_ROOTS.iter().cloned().collect(),
        };
        builder.with_root_certificates(roots)
    };
    let config = match (&redis.tls_cert_file, &redis.tls_key_file) {
        (Some(cert), Some(key)) => {
            let chain = client_chain(cert)?;
            // The key's bytes never appear in an error.
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|_| TlsError::BadKey { path: key.clone() })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(TlsError::ClientAuth)?
        }
        _ => builder.with_no_client_auth(),
    };
    let name = redis
        .tls_server_name
        .clone()
        .unwrap_or_else(|| endpoint.host.clone());
    let server_name = ServerName::try_from(name.clone()).map_err(|_| TlsError::ServerName {
        endpoint: endpoint.name.clone(),
        name,
    })?;
    Ok(Tls {
        config: Arc::new(config),
        server_name,
    })
}

/// The roots of `redis.tls.caFile`: every PEM certificate in it, at least one.
fn ca_roots(ca: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let pem = std::fs::read(ca).map_err(|source| TlsError::Unreadable {
        setting: "redis.tls.caFile",
        path: ca.to_path_buf(),
        source,
    })?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|source| TlsError::CaNotPem {
            path: ca.to_path_buf(),
            source,
        })?;
        roots.add(cert).map_err(|source| TlsError::CaRejected {
            path: ca.to_path_buf(),
            source,
        })?;
    }
    if roots.is_empty() {
        return Err(TlsError::NoCertificate {
            setting: "redis.tls.caFile",
            path: ca.to_path_buf(),
        });
    }
    Ok(roots)
}

/// The client certificate chain of `redis.tls.certFile`, at least one certificate.
fn client_chain(cert: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = std::fs::read(cert).map_err(|source| TlsError::Unreadable {
        setting: "redis.tls.certFile",
        path: cert.to_path_buf(),
        source,
    })?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::CertNotPem {
            path: cert.to_path_buf(),
            source,
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            setting: "redis.tls.certFile",
            path: cert.to_path_buf(),
        });
    }
    Ok(chain)
}

/// `redis.tls.insecureSkipVerify`: accept any certificate (signatures are still checked, so
/// the handshake itself is sound). Testing only.
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
