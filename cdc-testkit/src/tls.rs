//! A throwaway certificate authority and the certificates a TLS-enabled cluster uses.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::error::{IoContext, Result};
use crate::os::{self, ServerUser};

/// The names the default server certificate is valid for.
pub const DEFAULT_SERVER_NAMES: &[&str] = &["localhost", "127.0.0.1"];

/// A certificate and its private key, as PEM text and as files on disk.
///
/// The key file has mode 0600. For server certificates it belongs to the server user; for
/// client certificates to the test process (libpq refuses a client key readable by others).
#[derive(Debug, Clone)]
pub struct IssuedCert {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key (PKCS#8), PEM.
    pub key_pem: String,
    /// File holding [`IssuedCert::cert_pem`].
    pub cert_path: PathBuf,
    /// File holding [`IssuedCert::key_pem`].
    pub key_path: PathBuf,
}

/// The TLS material of a cluster started with TLS: a per-cluster CA, the server certificate
/// it issued, and the ability to issue more certificates (client certificates for `cert`
/// authentication, server certificates with other names).
///
/// Every certificate is signed by the same CA, whose certificate is at
/// [`TlsFiles::ca_cert_path`]; the server is configured with it as `ssl_ca_file`, so it
/// verifies client certificates against it. The one exception is
/// [`TlsFiles::issue_server_cert_from_unknown_ca`], which exists to be untrusted.
#[derive(Debug)]
pub struct TlsFiles {
    dir: PathBuf,
    ca_cert_pem: String,
    ca_cert_der: Vec<u8>,
    ca_cert_path: PathBuf,
    server: IssuedCert,
    server_names: Vec<String>,
    issuer: Issuer<'static, KeyPair>,
    server_user: Option<ServerUser>,
    counter: AtomicU32,
}

impl TlsFiles {
    /// Create a CA and a server certificate for `server_names` in `dir`.
    pub(crate) fn create(
        dir: &Path,
        server_names: &[String],
        server_user: Option<ServerUser>,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
        os::chmod(dir, 0o755)?;

        let (issuer, ca_cert) = generate_ca("pgcdc testkit CA")?;
        let ca_cert_pem = ca_cert.pem();
        let ca_cert_path = dir.join("ca.crt");
        write_file(&ca_cert_path, &ca_cert_pem, 0o644)?;

        let mut files = Self {
            dir: dir.to_path_buf(),
            ca_cert_pem,
            ca_cert_der: ca_cert.der().to_vec(),
            ca_cert_path,
            server: IssuedCert {
                cert_pem: String::new(),
                key_pem: String::new(),
                cert_path: dir.join("server.crt"),
                key_path: dir.join("server.key"),
            },
            server_names: server_names.to_vec(),
            issuer,
            server_user,
            counter: AtomicU32::new(0),
        };
        let (cert_pem, key_pem) = files.sign_server(server_names)?;
        files.install_server_cert(&cert_pem, &key_pem)?;
        files.server.cert_pem = cert_pem;
        files.server.key_pem = key_pem;
        Ok(files)
    }

    /// The CA certificate, PEM. Trust this (and only this) to verify the server.
    pub fn ca_cert_pem(&self) -> &str {
        &self.ca_cert_pem
    }

    /// The CA certificate, DER.
    pub fn ca_cert_der(&self) -> &[u8] {
        &self.ca_cert_der
    }

    /// File holding the CA certificate (for `sslrootcert=`).
    pub fn ca_cert_path(&self) -> &Path {
        &self.ca_cert_path
    }

    /// The certificate the server was started with (`server.crt`/`server.key` in the TLS
    /// directory). If [`crate::Cluster::replace_server_cert`] was called since, the files
    /// hold the replacement.
    pub fn server_cert(&self) -> &IssuedCert {
        &self.server
    }

    /// The names (DNS names or IP addresses) in the server certificate's subjectAltName, as
    /// configured at build time.
    pub fn server_names(&self) -> &[String] {
        &self.server_names
    }

    /// Directory holding all TLS files of the cluster.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Issue a client certificate with subject CN `common_name` (for `cert` authentication
    /// the CN must be the user name), signed by the cluster's CA and usable for
    /// `sslcert`/`sslkey`. Written to new files in [`TlsFiles::dir`]; the key has mode 0600
    /// and belongs to the test process.
    pub fn issue_client_cert(&self, common_name: &str) -> Result<IssuedCert> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer)?;
        self.write_issued("client", cert.pem(), key.serialize_pem(), None)
    }

    /// Issue a server certificate for `names` (DNS names or IP addresses), signed by the
    /// cluster's CA, written to new files in [`TlsFiles::dir`] (key mode 0600, owned by the
    /// server user). Use it with [`crate::Cluster::replace_server_cert`], e.g. a certificate
    /// only for `wrong.example` to see `verify-full` fail while `verify-ca` succeeds.
    pub fn issue_server_cert(&self, names: &[&str]) -> Result<IssuedCert> {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let (cert_pem, key_pem) = self.sign_server(&names)?;
        self.write_issued("server", cert_pem, key_pem, self.server_user)
    }

    /// Issue a server certificate for `names` signed by a new CA that exists only for this
    /// certificate — no client trusts it, and it is not [`TlsFiles::ca_cert_pem`]. Written
    /// like [`TlsFiles::issue_server_cert`]; use it with
    /// [`crate::Cluster::replace_server_cert`] to see chain verification (`verify-ca`,
    /// `verify-full`) fail, or as the certificate of an impostor that clients which verify
    /// nothing (`sslmode=require`) accept.
    pub fn issue_server_cert_from_unknown_ca(&self, names: &[&str]) -> Result<IssuedCert> {
        let (issuer, _) = generate_ca("pgcdc testkit unknown CA")?;
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let (cert_pem, key_pem) = sign_server_with(&issuer, &names)?;
        self.write_issued("server", cert_pem, key_pem, self.server_user)
    }

    fn sign_server(&self, names: &[String]) -> Result<(String, String)> {
        sign_server_with(&self.issuer, names)
    }

    /// Overwrite `server.crt`/`server.key` (what the server's configuration points at).
    pub(crate) fn install_server_cert(&self, cert_pem: &str, key_pem: &str) -> Result<()> {
        write_file(&self.server.cert_path, cert_pem, 0o644)?;
        os::chown(&self.server.cert_path, self.server_user)?;
        write_file(&self.server.key_path, key_pem, 0o600)?;
        os::chown(&self.server.key_path, self.server_user)?;
        Ok(())
    }

    fn write_issued(
        &self,
        kind: &str,
        cert_pem: String,
        key_pem: String,
        owner: Option<ServerUser>,
    ) -> Result<IssuedCert> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let cert_path = self.dir.join(format!("{kind}-{n}.crt"));
        let key_path = self.dir.join(format!("{kind}-{n}.key"));
        write_file(&cert_path, &cert_pem, 0o644)?;
        write_file(&key_path, &key_pem, 0o600)?;
        os::chown(&cert_path, owner)?;
        os::chown(&key_path, owner)?;
        Ok(IssuedCert {
            cert_pem,
            key_pem,
            cert_path,
            key_path,
        })
    }
}

/// A new self-signed CA: its issuer (to sign with) and its certificate.
fn generate_ca(common_name: &str) -> Result<(Issuer<'static, KeyPair>, rcgen::Certificate)> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    Ok((Issuer::new(ca_params, ca_key), ca_cert))
}

/// A server certificate for `names` signed by `issuer`, and its key, as PEM.
fn sign_server_with(issuer: &Issuer<'_, KeyPair>, names: &[String]) -> Result<(String, String)> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names.to_vec())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        DnType::CommonName,
        names.first().map_or("pgcdc testkit server", String::as_str),
    );
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Write `contents` to `path` (replacing it) and set its mode.
fn write_file(path: &Path, contents: &str, mode: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // Create with the final mode so a key is never briefly world-readable.
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .ctx(|| format!("create {}", path.display()))?;
    f.write_all(contents.as_bytes())
        .ctx(|| format!("write {}", path.display()))?;
    os::chmod(path, mode)
}
