//! TLS settings of one endpoint: roots (`caFile` or the web PKI), the client certificate, the
//! name to verify (`serverName`), and the test-only `insecureSkipVerify`.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use super::Tls;
use crate::config::{Endpoint, RedisConfig};

pub(super) fn tls_settings(endpoint: &Endpoint, redis: &RedisConfig) -> Result<Tls, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let builder = if redis.tls_insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match &redis.tls_ca_file {
            Some(ca) => {
                let pem = std::fs::read(ca)
                    .map_err(|e| format!("redis.tls.caFile: cannot read {}: {e}", ca.display()))?;
                for cert in CertificateDer::pem_slice_iter(&pem) {
                    let cert = cert.map_err(|e| {
                        format!(
                            "redis.tls.caFile: {} is not PEM certificates: {e}",
                            ca.display()
                        )
                    })?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("redis.tls.caFile: {}: {e}", ca.display()))?;
                }
                if roots.is_empty() {
                    return Err(format!(
                        "redis.tls.caFile: {} holds no PEM certificate",
                        ca.display()
                    ));
                }
            }
            // Managed Redis with certificates from a public CA.
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        builder.with_root_certificates(roots)
    };
    let config = match (&redis.tls_cert_file, &redis.tls_key_file) {
        (Some(cert), Some(key)) => {
            let pem = std::fs::read(cert)
                .map_err(|e| format!("redis.tls.certFile: cannot read {}: {e}", cert.display()))?;
            let chain = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("redis.tls.certFile: {}: {e}", cert.display()))?;
            if chain.is_empty() {
                return Err(format!(
                    "redis.tls.certFile: {} holds no PEM certificate",
                    cert.display()
                ));
            }
            // The key's bytes never appear in an error.
            let key = PrivateKeyDer::from_pem_file(key).map_err(|_| {
                format!(
                    "redis.tls.keyFile: {} is not a readable PEM private key",
                    key.display()
                )
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("redis.tls.certFile/keyFile: {e}"))?
        }
        _ => builder.with_no_client_auth(),
    };
    let name = redis
        .tls_server_name
        .clone()
        .unwrap_or_else(|| endpoint.host.clone());
    let server_name = ServerName::try_from(name.clone())
        .map_err(|_| format!("{}: {name:?} is not a valid TLS server name", endpoint.name))?;
    Ok(Tls {
        config: Arc::new(config),
        server_name,
    })
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
