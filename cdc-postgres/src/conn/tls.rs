//! rustls client configurations that check the server certificate exactly as far as the
//! `sslmode` asks (see [`SslMode`]), with the `sslrootcert` CAs and the optional client
//! certificate. One configuration serves both the replication and the SQL connection.

use std::sync::Arc;

use cdc_core::{Error, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_cert_signed_by_trust_anchor};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::config::{PemSource, SslMode, TlsConfig};

/// How much of the server certificate is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verification {
    /// Nothing (`allow`, `prefer`, `require` without `sslrootcert`): the connection is
    /// encrypted but the server is not authenticated. The handshake signature is still
    /// checked against the presented certificate.
    None,
    /// The chain must end at a CA from `sslrootcert`; the host name is not checked
    /// (`verify-ca`, and every other TLS mode when `sslrootcert` is given, as in libpq).
    Chain,
    /// The chain, and the certificate must be valid for the host name (`verify-full`).
    ChainAndName,
}

impl Verification {
    /// The verification libpq performs for these settings.
    pub fn for_config(tls: &TlsConfig) -> Verification {
        match tls.mode {
            SslMode::VerifyFull => Verification::ChainAndName,
            SslMode::VerifyCa => Verification::Chain,
            _ if tls.root_cert.is_some() => Verification::Chain,
            _ => Verification::None,
        }
    }
}

/// The crypto provider: ring, independent of any process-wide default.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds the rustls client configuration for `tls`: the verifier per
/// [`Verification::for_config`], the client certificate if configured, and ALPN
/// `postgresql`. Files are read now, so call it per connection to pick up rotated files.
///
/// Errors (Config): unreadable files, files without a certificate or key, a key that does
/// not match rustls' expectations, `verify-*` without a root certificate.
pub fn client_config(tls: &TlsConfig) -> Result<Arc<ClientConfig>> {
    let provider = provider();
    let verifier = verifier(tls, &provider)?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::config(format!("TLS setup failed: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match (&tls.client_cert, &tls.client_key) {
        (Some(cert), Some(key)) => {
            let certs = load_certs(cert, "sslcert")?;
            let key = load_key(key)?;
            builder.with_client_auth_cert(certs, key).map_err(|e| {
                Error::config(format!(
                    "the client certificate (sslcert) and key (sslkey) cannot be used: {e}"
                ))
            })?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(Error::config(
                "a client certificate needs both sslcert and sslkey",
            ));
        }
    };
    // PostgreSQL 17+ checks ALPN when a client sends it; older servers ignore it.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(Arc::new(config))
}

/// The server certificate verifier for `tls` per [`Verification::for_config`]; every
/// certificate check is rustls' own, and so is the check of the handshake signature with
/// `provider`'s algorithms.
fn verifier(
    tls: &TlsConfig,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>> {
    let verification = Verification::for_config(tls);
    if verification == Verification::None {
        return Ok(Arc::new(AcceptAnyCertificate {
            provider: provider.clone(),
        }));
    }
    let source = tls.root_cert.as_ref().ok_or_else(|| {
        Error::config(format!(
            "sslmode={} needs sslrootcert (the CA certificate to verify the server against)",
            tls.mode
        ))
    })?;
    let mut roots = RootCertStore::empty();
    for cert in load_certs(source, "sslrootcert")? {
        roots.add(cert).map_err(|e| {
            Error::config(format!(
                "sslrootcert holds a certificate rustls cannot use as a trust anchor: {e}"
            ))
        })?;
    }
    let roots = Arc::new(roots);
    if verification == Verification::Chain {
        return Ok(Arc::new(ChainOnly {
            roots,
            provider: provider.clone(),
        }));
    }
    let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| Error::config(format!("cannot build the certificate verifier: {e}")))?;
    Ok(webpki)
}

/// The name to present (SNI) and verify: the host name, or its IP address.
///
/// With [`Verification::ChainAndName`] an unusable name is a Config error. Otherwise a name
/// rustls cannot represent falls back to `fallback` (the peer's address), which is only
/// used for SNI-less handshakes.
pub fn server_name(
    host: &str,
    tls: &TlsConfig,
    fallback: std::net::IpAddr,
) -> Result<ServerName<'static>> {
    match ServerName::try_from(host.to_owned()) {
        Ok(name) => Ok(name),
        Err(_) if Verification::for_config(tls) == Verification::ChainAndName => {
            Err(Error::config(format!(
                "host {host:?} is not a valid DNS name or IP address, so sslmode=verify-full cannot check the certificate against it"
            )))
        }
        Err(_) => Ok(ServerName::IpAddress(fallback.into())),
    }
}

fn read_pem(source: &PemSource, what: &str) -> Result<Vec<u8>> {
    match source {
        PemSource::Inline(text) => Ok(text.as_bytes().to_vec()),
        PemSource::File(path) => std::fs::read(path).map_err(|e| {
            Error::config(format!("cannot read {what} file {}: {e}", path.display())).with_source(e)
        }),
    }
}

fn describe(source: &PemSource, what: &str) -> String {
    match source {
        PemSource::File(path) => format!("{what} file {}", path.display()),
        PemSource::Inline(_) => format!("inline {what}"),
    }
}

/// Every certificate in a PEM source; an error if there is none or one is malformed.
pub fn load_certs(source: &PemSource, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let pem = read_pem(source, what)?;
    let certs = rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::config(format!("malformed PEM in {}: {e}", describe(source, what))))?;
    if certs.is_empty() {
        return Err(Error::config(format!(
            "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            describe(source, what)
        )));
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in a PEM source.
pub fn load_key(source: &PemSource) -> Result<PrivateKeyDer<'static>> {
    let pem = read_pem(source, "sslkey")?;
    rustls_pemfile::private_key(&mut pem.as_slice())
        .map_err(|e| {
            Error::config(format!(
                "malformed PEM in {}: {e}",
                describe(source, "sslkey")
            ))
        })?
        .ok_or_else(|| {
            Error::config(format!(
                "{} holds no PEM private key",
                describe(source, "sslkey")
            ))
        })
}

/// Accepts any certificate (no authentication of the server), but still checks that the
/// handshake was signed by the key of the presented certificate.
#[derive(Debug)]
struct AcceptAnyCertificate {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Chain verification without the host name check ([`Verification::Chain`]: `verify-ca`,
/// and `sslrootcert` with the other TLS modes).
///
/// The certificate check is rustls' chain-only verification,
/// [`verify_server_cert_signed_by_trust_anchor`] — the check [`WebPkiServerVerifier`]
/// makes before it checks the name: a chain from the certificate through the presented
/// intermediates to a CA in `roots`, every signature with the provider's algorithms,
/// validity periods, and the server-authentication key usage. The name is never looked
/// at, rather than checked and its failure ignored. Handshake signatures are verified by
/// rustls with the same algorithms.
#[derive(Debug)]
struct ChainOnly {
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls(mode: SslMode, root: bool) -> TlsConfig {
        TlsConfig {
            mode,
            root_cert: root.then(|| PemSource::File("/ca.pem".into())),
            client_cert: None,
            client_key: None,
            ..TlsConfig::default()
        }
    }

    #[test]
    fn verification_follows_libpq() {
        assert_eq!(
            Verification::for_config(&tls(SslMode::Require, false)),
            Verification::None
        );
        assert_eq!(
            Verification::for_config(&tls(SslMode::Prefer, false)),
            Verification::None
        );
        assert_eq!(
            Verification::for_config(&tls(SslMode::Require, true)),
            Verification::Chain
        );
        assert_eq!(
            Verification::for_config(&tls(SslMode::Allow, true)),
            Verification::Chain
        );
        assert_eq!(
            Verification::for_config(&tls(SslMode::VerifyCa, true)),
            Verification::Chain
        );
        assert_eq!(
            Verification::for_config(&tls(SslMode::VerifyFull, true)),
            Verification::ChainAndName
        );
    }

    #[test]
    fn unverified_config_builds_without_files() {
        let config = client_config(&tls(SslMode::Require, false)).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"postgresql".to_vec()]);
    }

    #[test]
    fn missing_and_empty_pem_are_config_errors() {
        let err = client_config(&tls(SslMode::VerifyFull, true)).unwrap_err();
        assert_eq!(err.kind(), cdc_core::ErrorKind::Config);
        assert!(err.message().contains("/ca.pem"), "{err}");
        let mut t = tls(SslMode::VerifyCa, false);
        t.root_cert = Some(PemSource::Inline("not a certificate".into()));
        let err = client_config(&t).unwrap_err();
        assert!(err.message().contains("no PEM certificate"), "{err}");
        assert!(load_key(&PemSource::Inline(String::new())).is_err());
    }

    #[test]
    fn server_names() {
        let any = std::net::IpAddr::from([127, 0, 0, 1]);
        assert!(matches!(
            server_name("127.0.0.1", &tls(SslMode::VerifyFull, true), any).unwrap(),
            ServerName::IpAddress(_)
        ));
        assert!(matches!(
            server_name("db.example", &tls(SslMode::Require, false), any).unwrap(),
            ServerName::DnsName(_)
        ));
        assert!(server_name("bad name", &tls(SslMode::VerifyFull, true), any).is_err());
        assert!(server_name("bad name", &tls(SslMode::Require, false), any).is_ok());
    }

    /// A CA that signs certificates with rcgen, and its certificate as PEM.
    struct Ca {
        issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
        pem: String,
    }

    fn ca(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            issuer: rcgen::Issuer::new(params, key),
            pem,
        }
    }

    /// A certificate for `names` issued by `ca`, for server (or, with `client`, client)
    /// authentication; `expired` puts its validity in the past.
    fn leaf(ca: &Ca, names: &[&str], client: bool, expired: bool) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params.extended_key_usages = vec![if client {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        }];
        if expired {
            params.not_before = rcgen::date_time_ymd(2001, 1, 1);
            params.not_after = rcgen::date_time_ymd(2002, 1, 1);
        }
        params.signed_by(&key, &ca.issuer).unwrap().der().clone()
    }

    /// An intermediate CA signed by `root`.
    fn intermediate(root: &Ca, name: &str) -> (Ca, CertificateDer<'static>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.signed_by(&key, &root.issuer).unwrap();
        let der = cert.der().clone();
        let ca = Ca {
            issuer: rcgen::Issuer::new(params, key),
            pem: cert.pem(),
        };
        (ca, der)
    }

    /// Runs the verifier for `mode` trusting `trusted` on `cert` (with `intermediates`)
    /// as presented by a server called `name`.
    fn check(
        mode: SslMode,
        trusted: &Ca,
        cert: &CertificateDer<'static>,
        intermediates: &[CertificateDer<'static>],
        name: &str,
    ) -> std::result::Result<(), rustls::Error> {
        let config = TlsConfig {
            mode,
            root_cert: Some(PemSource::Inline(trusted.pem.clone())),
            ..TlsConfig::default()
        };
        let verifier = verifier(&config, &provider()).unwrap();
        let name = ServerName::try_from(name.to_owned()).unwrap();
        verifier
            .verify_server_cert(cert, intermediates, &name, &[], UnixTime::now())
            .map(|_| ())
    }

    fn is(err: std::result::Result<(), rustls::Error>, expected: rustls::CertificateError) -> bool {
        matches!(err, Err(rustls::Error::InvalidCertificate(e)) if e == expected)
    }

    #[test]
    fn verify_ca_checks_the_chain_and_not_the_name() {
        use rustls::CertificateError as Cert;
        let (ours, theirs) = (ca("ours"), ca("theirs"));
        let right = leaf(&ours, &["db.example"], false, false);
        check(SslMode::VerifyCa, &ours, &right, &[], "db.example").unwrap();
        check(SslMode::VerifyFull, &ours, &right, &[], "db.example").unwrap();
        // Our CA, another name: only verify-full minds.
        check(SslMode::VerifyCa, &ours, &right, &[], "other.example").unwrap();
        // Any TLS mode with sslrootcert verifies the chain the same way.
        check(SslMode::Require, &ours, &right, &[], "other.example").unwrap();
        let err = check(SslMode::VerifyFull, &ours, &right, &[], "other.example");
        assert!(
            matches!(
                err,
                Err(rustls::Error::InvalidCertificate(
                    Cert::NotValidForName | Cert::NotValidForNameContext { .. }
                ))
            ),
            "{err:?}"
        );
        // Another CA: refused whatever the name, by both.
        for names in [&["db.example"][..], &["wrong.example"]] {
            let foreign = leaf(&theirs, names, false, false);
            for mode in [SslMode::VerifyCa, SslMode::VerifyFull] {
                let err = check(mode, &ours, &foreign, &[], "db.example");
                assert!(
                    is(err.clone(), Cert::UnknownIssuer),
                    "{mode} {names:?}: {err:?}"
                );
            }
        }
    }

    #[test]
    fn verify_ca_still_checks_validity_usage_and_intermediates() {
        use rustls::CertificateError as Cert;
        let root = ca("root");
        let expired = leaf(&root, &["db.example"], false, true);
        let err = check(SslMode::VerifyCa, &root, &expired, &[], "db.example");
        assert!(
            matches!(
                err,
                Err(rustls::Error::InvalidCertificate(
                    Cert::Expired | Cert::ExpiredContext { .. }
                ))
            ),
            "{err:?}"
        );
        // A client certificate is not a server certificate.
        let client = leaf(&root, &["db.example"], true, false);
        let err = check(SslMode::VerifyCa, &root, &client, &[], "db.example");
        assert!(err.is_err(), "{err:?}");
        // Through an intermediate the server presents: accepted; without it: unknown.
        let (middle, middle_der) = intermediate(&root, "intermediate");
        let issued = leaf(&middle, &["db.example"], false, false);
        check(
            SslMode::VerifyCa,
            &root,
            &issued,
            &[middle_der],
            "wrong.example",
        )
        .unwrap();
        let err = check(SslMode::VerifyCa, &root, &issued, &[], "wrong.example");
        assert!(is(err.clone(), Cert::UnknownIssuer), "{err:?}");
        // Garbage is an error, not a panic.
        let garbage = CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x00]);
        assert!(check(SslMode::VerifyCa, &root, &garbage, &[], "db.example").is_err());
    }
}
