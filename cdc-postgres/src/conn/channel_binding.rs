//! SCRAM channel binding per `channel_binding` (see [`ChannelBinding`]) for both
//! connections: the `tls-server-end-point` data of a TLS connection (RFC 5929), the checks
//! made before anything is sent, and — for our own replication session — which SCRAM
//! mechanism and gs2 flag answer the server's offer, and whether the login satisfied
//! `channel_binding=require` ([`Negotiation`]). The SQL connection hands the same data to
//! tokio-postgres, which makes the same choices (see `sql.rs`); the messages for what it
//! reports are here too, so both connections explain a failure alike.

use cdc_core::{Error, Result, ServerError};
use postgres_protocol::authentication::sasl::{self, SCRAM_SHA_256, SCRAM_SHA_256_PLUS};
use sha2::{Digest as _, Sha224, Sha256, Sha384, Sha512};
use x509_cert::der::asn1::{AnyRef, BitStringRef, ContextSpecific};
use x509_cert::der::oid::ObjectIdentifier;
use x509_cert::der::oid::db::rfc5912::{
    DSA_WITH_SHA_1, DSA_WITH_SHA_224, DSA_WITH_SHA_256, ECDSA_WITH_SHA_224, ECDSA_WITH_SHA_256,
    ECDSA_WITH_SHA_384, ECDSA_WITH_SHA_512, ID_RSASSA_PSS, ID_SHA_1, ID_SHA_224, ID_SHA_256,
    ID_SHA_384, ID_SHA_512, MD_5_WITH_RSA_ENCRYPTION, SHA_1_WITH_RSA_ENCRYPTION,
    SHA_224_WITH_RSA_ENCRYPTION, SHA_256_WITH_RSA_ENCRYPTION, SHA_384_WITH_RSA_ENCRYPTION,
    SHA_512_WITH_RSA_ENCRYPTION,
};
use x509_cert::der::oid::db::rfc8410::{ID_ED_448, ID_ED_25519};
use x509_cert::der::{Decode, Reader, SliceReader, TagNumber};
use x509_cert::spki::AlgorithmIdentifierOwned;

use super::config::{ChannelBinding, ConnectionConfig, SslMode};
use super::transport::{Socket, describe_target};

/// `ecdsa-with-SHA1` (RFC 3279), which the OID database does not name.
const ECDSA_WITH_SHA_1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.1");

/// The SQLSTATEs with which PostgreSQL ends a SCRAM exchange for a reason other than the
/// password: `28000` (invalid authorization) for a channel binding that does not match its
/// certificate ("SCRAM channel binding check failed") and for a client that says it could
/// have bound while the server did offer binding ("SCRAM channel binding negotiation
/// error"), `08P01` (protocol violation) for malformed binding data. A wrong password is
/// `28P01`; pg_hba.conf rejections (also `28000`) come before any exchange.
const BINDING_REFUSED_SQLSTATES: [&str; 2] = ["28000", "08P01"];

/// The hash functions `tls-server-end-point` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EndPointHash {
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

impl EndPointHash {
    fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            EndPointHash::Sha224 => Sha224::digest(data).to_vec(),
            EndPointHash::Sha256 => Sha256::digest(data).to_vec(),
            EndPointHash::Sha384 => Sha384::digest(data).to_vec(),
            EndPointHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// The hash for a digest algorithm, MD5 and SHA-1 upgraded to SHA-256 (RFC 5929 §4.1).
    fn for_digest(oid: ObjectIdentifier) -> Option<EndPointHash> {
        match oid {
            ID_SHA_1 | ID_SHA_256 => Some(EndPointHash::Sha256),
            ID_SHA_224 => Some(EndPointHash::Sha224),
            ID_SHA_384 => Some(EndPointHash::Sha384),
            ID_SHA_512 => Some(EndPointHash::Sha512),
            _ => None,
        }
    }

    /// The hash for a certificate signed with `algorithm` (RFC 5929 §4.1): the signature's
    /// own hash function, except SHA-256 for MD5 and SHA-1 — what PostgreSQL (server and
    /// libpq) computes. `None` when the algorithm names no single hash function (Ed25519,
    /// Ed448) or is unknown here.
    fn for_signature(algorithm: &AlgorithmIdentifierOwned) -> Option<EndPointHash> {
        match algorithm.oid {
            MD_5_WITH_RSA_ENCRYPTION
            | SHA_1_WITH_RSA_ENCRYPTION
            | ECDSA_WITH_SHA_1
            | DSA_WITH_SHA_1
            | SHA_256_WITH_RSA_ENCRYPTION
            | ECDSA_WITH_SHA_256
            | DSA_WITH_SHA_256 => Some(EndPointHash::Sha256),
            SHA_224_WITH_RSA_ENCRYPTION | ECDSA_WITH_SHA_224 | DSA_WITH_SHA_224 => {
                Some(EndPointHash::Sha224)
            }
            SHA_384_WITH_RSA_ENCRYPTION | ECDSA_WITH_SHA_384 => Some(EndPointHash::Sha384),
            SHA_512_WITH_RSA_ENCRYPTION | ECDSA_WITH_SHA_512 => Some(EndPointHash::Sha512),
            ID_RSASSA_PSS => pss_hash(algorithm),
            _ => None,
        }
    }
}

/// The hash of an RSASSA-PSS signature: `hashAlgorithm`, field `[0]` of its parameters
/// (RFC 4055), SHA-1 when absent. Parameters are mandatory in a certificate's signature
/// algorithm; without them (or malformed) there is no answer.
fn pss_hash(algorithm: &AlgorithmIdentifierOwned) -> Option<EndPointHash> {
    let parameters = algorithm.parameters.as_ref()?;
    let hash = parameters
        .sequence(|reader| {
            let hash = ContextSpecific::<AlgorithmIdentifierOwned>::decode_explicit(
                reader,
                TagNumber::N0,
            )?;
            // The mask generation function, salt length and trailer do not matter here.
            let rest = reader.remaining_len();
            reader.read_slice(rest)?;
            Ok(hash.map(|field| field.value.oid))
        })
        .ok()?;
    EndPointHash::for_digest(hash.unwrap_or(ID_SHA_1))
}

/// The signature algorithm of a DER certificate, reading only the outer structure
/// (`SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue }`): the handshake
/// already accepted the certificate, and the contents of `tbsCertificate` do not matter.
fn signature_algorithm(cert: &[u8]) -> x509_cert::der::Result<AlgorithmIdentifierOwned> {
    let mut reader = SliceReader::new(cert)?;
    let algorithm = reader.sequence(|outer| {
        let _tbs_certificate = AnyRef::decode(outer)?;
        let algorithm = AlgorithmIdentifierOwned::decode(outer)?;
        let _signature = BitStringRef::decode(outer)?;
        Ok(algorithm)
    })?;
    reader.finish(algorithm)
}

/// The `tls-server-end-point` channel binding data for the server certificate `cert`
/// (DER): its hash by [`EndPointHash::for_signature`].
///
/// Errors: a description of the signature algorithm (or of the parse failure) for
/// messages, when no hash applies.
fn tls_server_end_point(cert: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let algorithm = signature_algorithm(cert)
        .map_err(|e| format!("a certificate pgcdc cannot read the signature algorithm of ({e})"))?;
    match EndPointHash::for_signature(&algorithm) {
        Some(hash) => Ok(hash.digest(cert)),
        None => Err(match algorithm.oid {
            ID_ED_25519 => "a certificate signed with Ed25519".to_owned(),
            ID_ED_448 => "a certificate signed with Ed448".to_owned(),
            ID_RSASSA_PSS => "a certificate signed with RSA-PSS without a known hash".to_owned(),
            other => format!("a certificate signed with algorithm {other}"),
        }),
    }
}

/// The certificate the server presented on `socket`, if it is a TLS connection.
fn server_certificate(socket: &Socket) -> Option<&[u8]> {
    match socket {
        Socket::Tls(stream) => {
            let (_, session) = stream.get_ref();
            session
                .peer_certificates()?
                .first()
                .map(|cert| cert.as_ref())
        }
        Socket::Tcp(_) | Socket::Unix(_) => None,
    }
}

/// Why the connection to `config`'s server is not encrypted, for messages.
fn why_plaintext(config: &ConnectionConfig) -> String {
    if config.is_unix_socket() {
        return "it is a Unix socket, which never uses TLS".to_owned();
    }
    match config.tls.mode {
        SslMode::Disable => "sslmode=disable".to_owned(),
        SslMode::Allow => "sslmode=allow tries without TLS first".to_owned(),
        mode => format!(
            "with sslmode={mode} the server did not accept TLS, or refused the TLS connection and it was retried without"
        ),
    }
}

/// What channel binding can use on `socket`, checked before anything is sent on it: the
/// `tls-server-end-point` data when the connection is TLS and `channel_binding` is not
/// `disable`, else `None`.
///
/// Errors (Config): `require` on a connection without TLS; with `prefer` or `require`, a
/// TLS server certificate whose end point has no defined hash (see [`ChannelBinding`]).
pub(crate) fn end_point(config: &ConnectionConfig, socket: &Socket) -> Result<Option<Vec<u8>>> {
    let mode = config.tls.channel_binding;
    if mode == ChannelBinding::Disable {
        return Ok(None);
    }
    let target = describe_target(config);
    if !socket.is_tls() {
        if mode == ChannelBinding::Require {
            return Err(Error::config(format!(
                "channel_binding=require needs a TLS connection, but the one to {target} is not encrypted ({}): connect over TCP with sslmode=require, verify-ca or verify-full, or set channel_binding=prefer",
                why_plaintext(config)
            )));
        }
        return Ok(None);
    }
    let cert = server_certificate(socket).ok_or_else(|| {
        Error::config(format!(
            "the server at {target} presented no certificate, so SCRAM channel binding is impossible: set channel_binding=disable only if sslmode=verify-full authenticates the server otherwise"
        ))
    })?;
    tls_server_end_point(cert).map(Some).map_err(|certificate| {
        Error::config(format!(
            "the server at {target} presents {certificate}, for which SCRAM channel binding (tls-server-end-point, RFC 5929) defines no hash (channel_binding={mode}): give the server a certificate signed with RSA or ECDSA, or set channel_binding=disable — then only sslmode=verify-full keeps a man in the middle out"
        ))
    })
}

/// The error for a server that refused the channel binding pgcdc sent (or its statement
/// that it could have bound): the TLS connection does not end at that server. `source` is
/// the server error (or an error carrying it). Config: retrying cannot help.
pub(crate) fn refused(target: &str, source: impl Into<cdc_core::BoxError>) -> Error {
    Error::config(format!(
        "the server at {target} refused SCRAM channel binding: the TLS connection does not end at that server (a man in the middle, or a proxy that terminates TLS), or something between them removed SCRAM-SHA-256-PLUS from the server's offer. Check the network path and authenticate the server with sslmode=verify-full and sslrootcert; set channel_binding=disable only if a proxy you trust terminates TLS"
    ))
    .with_source(source)
}

/// Whether `server`, an error during a SCRAM exchange in which the client bound or said
/// it could have, is PostgreSQL refusing the channel binding (see
/// `BINDING_REFUSED_SQLSTATES`).
pub(crate) fn is_refusal(server: &ServerError) -> bool {
    BINDING_REFUSED_SQLSTATES.contains(&server.code.as_str())
}

/// The error for a login that `channel_binding=require` does not allow, when the SQL
/// client (tokio-postgres) reports it — before sending a password. `scram` says whether
/// the server asked for SASL (then it did not offer SCRAM-SHA-256-PLUS); otherwise it
/// asked for trust, cert, password or md5 authentication, which tokio-postgres does not
/// tell apart.
pub(crate) fn require_unmet(
    target: &str,
    scram: bool,
    source: impl Into<cdc_core::BoxError>,
) -> Error {
    let what = if scram {
        "offers SASL without SCRAM-SHA-256-PLUS; check what is between pgcdc and the server (sslmode=verify-full authenticates it)"
    } else {
        "asks for trust, cert, password or md5 authentication, which cannot bind to the TLS connection; use scram-sha-256 for this user in pg_hba.conf with a password stored as SCRAM"
    };
    Error::config(format!(
        "channel_binding=require, but the server at {target} {what}, or set channel_binding=prefer; no password was sent"
    ))
    .with_source(source)
}

/// What the SCRAM client told the server about channel binding (the gs2 header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Told {
    /// `p=tls-server-end-point`: bound (SCRAM-SHA-256-PLUS).
    Bound,
    /// `y`: could bind, but the server did not offer it.
    CouldHave,
    /// `n`: does not bind (no TLS, or `channel_binding=disable`).
    CannotBind,
}

/// Channel binding during the authentication of our own replication session: which SCRAM
/// mechanism and gs2 flag answer the server's offer, what other authentication requests
/// mean under `require`, and whether the login bound.
///
/// The rules are libpq's: bind (SCRAM-SHA-256-PLUS) whenever the connection is TLS, the
/// server offers it and `channel_binding` is not `disable`; over TLS without the offer say
/// `y` (so a server that does support binding detects a stripped offer); else say `n`.
/// Under `require`, refuse every request but SCRAM-SHA-256-PLUS before sending a password,
/// and accept AuthenticationOk only after a completed, bound exchange.
#[derive(Debug)]
pub(crate) struct Negotiation {
    mode: ChannelBinding,
    tls: bool,
    /// The binding data; `Some` exactly when the connection is TLS and `mode` is not
    /// `disable`.
    end_point: Option<Vec<u8>>,
    target: String,
    told: Option<Told>,
    /// Whether the SCRAM exchange completed (the server's signature verified).
    finished: bool,
}

impl Negotiation {
    /// Starts with the checks of [`end_point`] (same errors), before anything is sent.
    pub(crate) fn start(config: &ConnectionConfig, socket: &Socket) -> Result<Negotiation> {
        Ok(Negotiation {
            mode: config.tls.channel_binding,
            tls: socket.is_tls(),
            end_point: end_point(config, socket)?,
            target: describe_target(config),
            told: None,
            finished: false,
        })
    }

    /// The server asks for `method` (`password` or `md5`) authentication: allowed unless
    /// `require` (Config error; the caller must not send the password).
    pub(crate) fn password_requested(&self, method: &str) -> Result<()> {
        if self.mode != ChannelBinding::Require {
            return Ok(());
        }
        Err(Error::config(format!(
            "channel_binding=require, but the server at {} asks for {method} authentication, which cannot bind to the TLS connection; the password was not sent. Use scram-sha-256 for this user in pg_hba.conf with a password stored as SCRAM, or set channel_binding=prefer",
            self.target
        )))
    }

    /// The SCRAM mechanism and channel binding to answer an AuthenticationSASL offering
    /// `mechanisms` with.
    ///
    /// Errors (Config): no SCRAM-SHA-256 mechanism usable under `channel_binding`;
    /// SCRAM-SHA-256-PLUS offered on a connection without TLS (the server has TLS that
    /// pgcdc does not: something in between terminates it) unless `disable`.
    pub(crate) fn choose(
        &mut self,
        mechanisms: &[String],
    ) -> Result<(&'static str, sasl::ChannelBinding)> {
        let offers = |name: &str| mechanisms.iter().any(|m| m == name);
        let (plain, plus) = (offers(SCRAM_SHA_256), offers(SCRAM_SHA_256_PLUS));
        if plus && !self.tls && self.mode != ChannelBinding::Disable {
            return Err(Error::config(format!(
                "the server at {} offers SCRAM-SHA-256-PLUS, which needs TLS, on a connection that is not encrypted: something between pgcdc and the server terminates TLS (a proxy, or a man in the middle). Connect with sslmode=verify-full; set channel_binding=disable only if that proxy is trusted",
                self.target
            )));
        }
        let choice = match (&self.end_point, plus, plain) {
            (Some(end_point), true, _) => Some((
                SCRAM_SHA_256_PLUS,
                sasl::ChannelBinding::tls_server_end_point(end_point.clone()),
                Told::Bound,
            )),
            _ if self.mode == ChannelBinding::Require => None,
            // Over TLS, and willing: tell the server it was not offered (a downgrade check).
            (Some(_), false, true) => Some((
                SCRAM_SHA_256,
                sasl::ChannelBinding::unrequested(),
                Told::CouldHave,
            )),
            (None, _, true) => Some((
                SCRAM_SHA_256,
                sasl::ChannelBinding::unsupported(),
                Told::CannotBind,
            )),
            _ => None,
        };
        let Some((mechanism, binding, told)) = choice else {
            return Err(if self.mode == ChannelBinding::Require {
                Error::config(format!(
                    "channel_binding=require, but the server at {} does not offer SCRAM-SHA-256-PLUS (it offers {mechanisms:?}); no password was sent. Check what is between pgcdc and the server (sslmode=verify-full authenticates it), or set channel_binding=prefer",
                    self.target
                ))
            } else {
                Error::config(format!(
                    "the server at {} offers SASL mechanisms {mechanisms:?}; pgcdc supports {SCRAM_SHA_256} and {SCRAM_SHA_256_PLUS} (with channel_binding={})",
                    self.target, self.mode
                ))
            });
        };
        self.told = Some(told);
        Ok((mechanism, binding))
    }

    /// The SCRAM exchange completed: the server proved it knows the password (and, if
    /// bound, that it is the end of this TLS connection).
    pub(crate) fn finished(&mut self) {
        self.finished = true;
    }

    /// The server sent AuthenticationOk: fine unless `require` and the login did not
    /// complete a bound SCRAM exchange (trust or cert authentication, or a server that
    /// skipped the end of the exchange).
    pub(crate) fn authenticated(&self) -> Result<()> {
        if self.mode != ChannelBinding::Require || (self.told == Some(Told::Bound) && self.finished)
        {
            return Ok(());
        }
        Err(Error::config(match self.told {
            None => format!(
                "channel_binding=require, but the server at {} accepted the login without a password exchange (trust or cert authentication in pg_hba.conf), so it never proved it is the server you meant: use scram-sha-256 for this user, or set channel_binding=prefer",
                self.target
            ),
            Some(_) => format!(
                "channel_binding=require, but the server at {} accepted the login before completing SCRAM-SHA-256-PLUS, so it never proved it is the server you meant: it may not be",
                self.target
            ),
        }))
    }

    /// Whether `server` (an error during authentication) is the server refusing the
    /// channel binding pgcdc sent or the `y` it said (see [`refused`]).
    pub(crate) fn refused(&self, server: &ServerError) -> bool {
        matches!(self.told, Some(Told::Bound | Told::CouldHave)) && is_refusal(server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RSASSA-PSS with SHA-384 (openssl req -x509 -newkey rsa-pss -sha384 ...).
    const RSA_PSS_SHA384: &str = "-----BEGIN CERTIFICATE-----
MIICnTCCAdegAwIBAgIUNsGYbpQPg1AIlrlWoQXvHePwFPowPAYJKoZIhvcNAQEK
MC+gDzANBglghkgBZQMEAgIFAKEcMBoGCSqGSIb3DQEBCDANBglghkgBZQMEAgIF
ADAZMRcwFQYDVQQDDA5wZ2NkYy1wc3MtdGVzdDAgFw0yNjEyMDMxNzAxMDFaGA8y
MTI2MTEwOTE3MDEwMVowGTEXMBUGA1UEAwwOcGdjZGMtcHNzLXRlc3Qwgc4wPAYJ
KoZIhvcNAQEKMC+gDzANBglghkgBZQMEAgIFAKEcMBoGCSqGSIb3DQEBCDANBglg
hkgBZQMEAgIFAAOBjQAwgYkCgYEA3BdVIXc79AeF7qPnHR8IRDzoXGeD1F1CovKr
sGJzqtWGqxm0OdJ08JP8MbIWYpCQ/eo1OY419Cpz7rhHp0r5OJxrOyYTl0GpZGdh
JqLVEVQiJ6OXknCvzi8cpnJLQMzuIA2FAwJOEJw3kahgVHkXZ7oNnMMrsYiBfRmc
Uyz2fVUCAwEAAaNTMFEwHQYDVR0OBBYEFEuoQjnk+yJ1+BPvQOagt0eQbiMHMB8G
A1UdIwQYMBaAFEuoQjnk+yJ1+BPvQOagt0eQbiMHMA8GA1UdEwEB/wQFMAMBAf8w
PAYJKoZIhvcNAQEKMC+gDzANBglghkgBZQMEAgIFAKEcMBoGCSqGSIb3DQEBCDAN
BglghkgBZQMEAgIFAAOBgQClOJeVjjRUF4zNFOhZHOKpuLm3RljYZK1YfEkeyjhI
+FTqfZksDF/S/x0ts6Lo6qtW7d9OnPxIAS/fxbfasDjVMhqBEz27Yxtpq814W8N/
traWcjC+/LuEuLMJCoy0F+kzCt7/mdEIIenR7TJTSFVLcW6fuqSVIdGsdh8iKvFD
Wg==
-----END CERTIFICATE-----
";
    /// `openssl x509 -outform der | openssl dgst -sha384` of [`RSA_PSS_SHA384`].
    const RSA_PSS_SHA384_END_POINT: &str = "5fe7e706a117c0f60a7b6f75882ec93131e68940a360adc9401b480ccd8f82220dd9a9e66fd0363f583058bd3843c4b2";

    /// sha1WithRSAEncryption: binds with SHA-256.
    const RSA_SHA1: &str = "-----BEGIN CERTIFICATE-----
MIICEjCCAXugAwIBAgIUU2asPGG2IW29SXMqNk5zq1tdz28wDQYJKoZIhvcNAQEF
BQAwGjEYMBYGA1UEAwwPcGdjZGMtc2hhMS10ZXN0MCAXDTI2MTIwMzE3MDEwMVoY
DzIxMjYxMTA5MTcwMTAxWjAaMRgwFgYDVQQDDA9wZ2NkYy1zaGExLXRlc3QwgZ8w
DQYJKoZIhvcNAQEBBQADgY0AMIGJAoGBALD7IvlWoa7EKxA1ufWeigyCTWv6QPtk
iC7M25roQ6qWwkzTCuOHtbjVHkJqWu7Ng7zp3yGa4tJ7ZjRpOAxSumLBXpgO3duy
DS9LKdMiF553hCVAYPHZTjIjUmpqL7GBGrshxISt0Aur8LQqqfwSVDZ8jD9cOdbL
OT7K9czkMF8PAgMBAAGjUzBRMB0GA1UdDgQWBBTzhlioR404hA9vcjEDnYxXBQR/
RjAfBgNVHSMEGDAWgBTzhlioR404hA9vcjEDnYxXBQR/RjAPBgNVHRMBAf8EBTAD
AQH/MA0GCSqGSIb3DQEBBQUAA4GBAEzSoEneR+8sAeEQ6b7hMNFbmsh6v3FrHuVD
QGvyBgast/Q6fhnf9bavxvsWjpJS/+gKMgkeEc8qjUkuYKM0G3ACnrCGv2M2E+10
XHaoTFjSpy62x8BBRX4KvyMyiA1Hi6fyaoanfHrjo7PQUBecVfpg81kqATEfA1eV
UmiEs0ud
-----END CERTIFICATE-----
";
    /// `openssl x509 -outform der | openssl dgst -sha256` of [`RSA_SHA1`].
    const RSA_SHA1_END_POINT: &str =
        "b7ca058fe83981a7d951603e4f3c8ade4377aae080293fcca2ecdbe1161929fa";

    fn der(pem: &str) -> Vec<u8> {
        rustls_pemfile::certs(&mut pem.as_bytes())
            .next()
            .unwrap()
            .unwrap()
            .to_vec()
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn self_signed(algorithm: &'static rcgen::SignatureAlgorithm) -> Vec<u8> {
        let key = rcgen::KeyPair::generate_for(algorithm).unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn end_point_hash_follows_the_signature_algorithm() {
        // Vectors computed by OpenSSL, as PostgreSQL would.
        assert_eq!(
            hex(&tls_server_end_point(&der(RSA_SHA1)).unwrap()),
            RSA_SHA1_END_POINT
        );
        assert_eq!(
            hex(&tls_server_end_point(&der(RSA_PSS_SHA384)).unwrap()),
            RSA_PSS_SHA384_END_POINT
        );
        let p256 = self_signed(&rcgen::PKCS_ECDSA_P256_SHA256);
        assert_eq!(
            tls_server_end_point(&p256).unwrap(),
            Sha256::digest(&p256).to_vec()
        );
        let p384 = self_signed(&rcgen::PKCS_ECDSA_P384_SHA384);
        assert_eq!(
            tls_server_end_point(&p384).unwrap(),
            Sha384::digest(&p384).to_vec()
        );
        let ed25519 = self_signed(&rcgen::PKCS_ED25519);
        let err = tls_server_end_point(&ed25519).unwrap_err();
        assert!(err.contains("Ed25519"), "{err}");
    }

    #[test]
    fn digest_oids_map_like_rfc_5929() {
        for (oid, hash) in [
            (MD_5_WITH_RSA_ENCRYPTION, EndPointHash::Sha256),
            (ECDSA_WITH_SHA_1, EndPointHash::Sha256),
            (DSA_WITH_SHA_1, EndPointHash::Sha256),
            (SHA_224_WITH_RSA_ENCRYPTION, EndPointHash::Sha224),
            (ECDSA_WITH_SHA_384, EndPointHash::Sha384),
            (SHA_512_WITH_RSA_ENCRYPTION, EndPointHash::Sha512),
            (ECDSA_WITH_SHA_512, EndPointHash::Sha512),
        ] {
            let algorithm = AlgorithmIdentifierOwned {
                oid,
                parameters: None,
            };
            assert_eq!(EndPointHash::for_signature(&algorithm), Some(hash), "{oid}");
        }
        // PSS without parameters is malformed in a certificate.
        let pss = AlgorithmIdentifierOwned {
            oid: ID_RSASSA_PSS,
            parameters: None,
        };
        assert_eq!(EndPointHash::for_signature(&pss), None);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bytes in [&b""[..], b"\x30", b"\x30\x03\x02\x01\x00", &[0xff; 64]] {
            assert!(tls_server_end_point(bytes).is_err());
        }
        let mut truncated = der(RSA_SHA1);
        truncated.truncate(truncated.len() - 1);
        assert!(tls_server_end_point(&truncated).is_err());
    }

    fn negotiation(mode: ChannelBinding, tls: bool) -> Negotiation {
        Negotiation {
            mode,
            tls,
            end_point: (tls && mode != ChannelBinding::Disable).then(|| vec![7; 32]),
            target: "db:5432".to_owned(),
            told: None,
            finished: false,
        }
    }

    fn offer(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    /// The gs2 header of the client-first-message: `p=tls-server-end-point`, `y` or `n`.
    fn gs2(binding: sasl::ChannelBinding) -> String {
        let scram = sasl::ScramSha256::new(b"pw", binding);
        let message = String::from_utf8(scram.message().to_vec()).unwrap();
        message.split(",,").next().unwrap().to_owned()
    }

    #[test]
    fn mechanism_and_gs2_flag_follow_libpq() {
        let both = offer(&[SCRAM_SHA_256_PLUS, SCRAM_SHA_256]);
        let plain = offer(&[SCRAM_SHA_256]);
        for (mode, tls, mechanisms, mechanism, flag) in [
            (
                ChannelBinding::Prefer,
                true,
                &both,
                SCRAM_SHA_256_PLUS,
                "p=tls-server-end-point",
            ),
            (
                ChannelBinding::Require,
                true,
                &both,
                SCRAM_SHA_256_PLUS,
                "p=tls-server-end-point",
            ),
            (ChannelBinding::Prefer, true, &plain, SCRAM_SHA_256, "y"),
            (ChannelBinding::Prefer, false, &plain, SCRAM_SHA_256, "n"),
            (ChannelBinding::Disable, true, &both, SCRAM_SHA_256, "n"),
            (ChannelBinding::Disable, true, &plain, SCRAM_SHA_256, "n"),
            (ChannelBinding::Disable, false, &both, SCRAM_SHA_256, "n"),
        ] {
            let mut n = negotiation(mode, tls);
            let (chosen, binding) = n.choose(mechanisms).unwrap();
            assert_eq!(chosen, mechanism, "{mode} tls={tls} {mechanisms:?}");
            assert_eq!(gs2(binding), flag, "{mode} tls={tls} {mechanisms:?}");
        }
    }

    #[test]
    fn require_refuses_everything_but_a_completed_bound_exchange() {
        let mut n = negotiation(ChannelBinding::Require, true);
        let err = n.choose(&offer(&[SCRAM_SHA_256])).map(|c| c.0).unwrap_err();
        assert!(
            err.message().contains("channel_binding=require")
                && err.message().contains("SCRAM-SHA-256-PLUS"),
            "{err}"
        );
        for method in ["password", "md5"] {
            let err = n.password_requested(method).unwrap_err();
            assert!(err.message().contains(method), "{err}");
        }
        // trust / cert: AuthenticationOk without any exchange.
        let err = negotiation(ChannelBinding::Require, true)
            .authenticated()
            .unwrap_err();
        assert!(err.message().contains("trust"), "{err}");
        // Bound but not completed.
        let mut n = negotiation(ChannelBinding::Require, true);
        n.choose(&offer(&[SCRAM_SHA_256_PLUS, SCRAM_SHA_256]))
            .unwrap();
        assert!(n.authenticated().is_err());
        n.finished();
        n.authenticated().unwrap();
        // prefer and disable accept the other methods.
        for mode in [ChannelBinding::Prefer, ChannelBinding::Disable] {
            let n = negotiation(mode, true);
            n.password_requested("md5").unwrap();
            n.authenticated().unwrap();
        }
    }

    #[test]
    fn plus_without_tls_means_something_terminates_tls() {
        let both = offer(&[SCRAM_SHA_256_PLUS, SCRAM_SHA_256]);
        let err = negotiation(ChannelBinding::Prefer, false)
            .choose(&both)
            .map(|c| c.0)
            .unwrap_err();
        assert!(err.message().contains("terminates TLS"), "{err}");
        // Unless the user opted out of binding.
        negotiation(ChannelBinding::Disable, false)
            .choose(&both)
            .unwrap();
    }

    #[test]
    fn unknown_mechanisms_are_a_config_error() {
        let err = negotiation(ChannelBinding::Prefer, true)
            .choose(&offer(&["OAUTHBEARER"]))
            .map(|c| c.0)
            .unwrap_err();
        assert_eq!(err.kind(), cdc_core::ErrorKind::Config);
        assert!(err.message().contains("OAUTHBEARER"), "{err}");
    }

    #[test]
    fn only_an_authorization_error_after_binding_is_a_refusal() {
        let server = |code: &str| ServerError {
            severity: "FATAL".into(),
            code: code.into(),
            message: "SCRAM channel binding check failed".into(),
            detail: None,
            hint: None,
        };
        let mut n = negotiation(ChannelBinding::Prefer, true);
        assert!(!n.refused(&server("08P01")));
        n.choose(&offer(&[SCRAM_SHA_256_PLUS])).unwrap();
        assert!(n.refused(&server("08P01")));
        assert!(n.refused(&server("28000")));
        assert!(!n.refused(&server("28P01")));
        let mut n = negotiation(ChannelBinding::Prefer, false);
        n.choose(&offer(&[SCRAM_SHA_256])).unwrap();
        assert!(!n.refused(&server("08P01")));
    }
}
