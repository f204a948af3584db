//! X.509 for the kubelet API's TLS, without a certificate library: a self-signed serving
//! certificate (ECDSA P-256 with SHA-256, signed with `ring`, written by a small DER
//! writer), and a bounded DER reader of the two things a server takes from a certificate:
//! the subject's CN and Os (the user and groups a client certificate authenticates as, as
//! kubelet's x509 authenticator maps them) and the validity. Pure: no files, no clock.
//!
//! The reader trusts nothing about its input (a length never reads past its parent, a
//! certificate is at most `MAX_CERT_DER` bytes), but it verifies nothing either: it is
//! meant for a certificate rustls has already verified.

use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Longest common name `self_signed` accepts, in bytes (RFC 5280's upper bound is 64
/// characters, but kubelet's `<hostname>@<unix seconds>` can be longer, and Go does not
/// enforce it).
pub const MAX_COMMON_NAME: usize = 256;
/// Most subjectAltName entries (DNS names and IPs together) `self_signed` accepts.
pub const MAX_ALT_NAMES: usize = 128;
/// Longest DNS name (RFC 1035).
pub const MAX_DNS_NAME: usize = 253;
/// Largest certificate the reader looks at (a client certificate is a few KiB).
pub const MAX_CERT_DER: usize = 64 * 1024;

/// Why a certificate could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum X509Error {
    /// The common name is empty, too long or holds control characters.
    #[error("common name {name:?} is not allowed: 1 to {MAX_COMMON_NAME} bytes without control characters")]
    CommonName {
        /// The name (cut to 80 bytes).
        name: String,
    },
    /// A DNS name is not one.
    #[error(
        "DNS name {name:?} is not allowed: 1 to {MAX_DNS_NAME} bytes of labels of letters, digits, '-' and '_' \
         separated by '.', optionally after \"*.\""
    )]
    DnsName {
        /// The name (cut to 80 bytes).
        name: String,
    },
    /// More DNS names and IPs than `MAX_ALT_NAMES`.
    #[error("{count} DNS names and IPs: at most {MAX_ALT_NAMES} are allowed")]
    TooManyNames {
        /// How many were given.
        count: usize,
    },
    /// A validity bound a certificate cannot hold.
    #[error("validity {what} is out of range: a certificate holds times from 1950 to 9999")]
    ValidityRange {
        /// `notBefore` or `notAfter`.
        what: &'static str,
    },
    /// `ring` failed (its error type carries nothing more than that).
    #[error("cannot {step}: the crypto library failed")]
    Crypto {
        /// What was being done.
        step: &'static str,
    },
    /// The certificate is larger than `MAX_CERT_DER`.
    #[error("a certificate of {len} bytes: at most {MAX_CERT_DER} are read")]
    TooLarge {
        /// Its length.
        len: usize,
    },
    /// The DER does not have the shape of a certificate.
    #[error("malformed certificate: {what}")]
    Malformed {
        /// What was wrong, and where.
        what: &'static str,
    },
    /// A name attribute in a string type this reader does not decode.
    #[error("a subject attribute of ASN.1 tag {tag:#04x}: only UTF8String, PrintableString, IA5String, TeletexString, BMPString and UniversalString are read")]
    StringType {
        /// The value's tag.
        tag: u8,
    },
    /// A string attribute whose bytes do not fit its type.
    #[error("a subject attribute that is not valid {kind}")]
    StringValue {
        /// The string type.
        kind: &'static str,
    },
    /// A validity time that is not a DER time.
    #[error("validity time {text:?} is not YYMMDDHHMMSSZ (UTCTime) or YYYYMMDDHHMMSSZ (GeneralizedTime)")]
    Time {
        /// The time's text (cut to 32 bytes).
        text: String,
    },
}

/// A certificate signing request and its private key, both PEM.
#[derive(Clone)]
pub struct CertificateRequest {
    /// The PKCS#10 request (`CERTIFICATE REQUEST`).
    pub csr_pem: String,
    /// The PKCS#8 private key (`PRIVATE KEY`).
    pub key_pem: String,
    /// The public key's SubjectPublicKeyInfo (DER), which kubelet's CSR names digest.
    pub public_key_info: Vec<u8>,
}

impl std::fmt::Debug for CertificateRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("CertificateRequest").field("csr_pem", &self.csr_pem).finish_non_exhaustive()
    }
}

/// A self-signed certificate and its private key, both PEM.
#[derive(Clone)]
pub struct SelfSigned {
    /// The certificate (`CERTIFICATE`).
    pub cert_pem: String,
    /// The PKCS#8 private key (`PRIVATE KEY`).
    pub key_pem: String,
}

impl std::fmt::Debug for SelfSigned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("SelfSigned").field("cert_pem", &self.cert_pem).finish_non_exhaustive()
    }
}

/// Who a certificate's subject names: the user (CN) and groups (every O), as kubelet's
/// x509 authenticator reads a client certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The subject's common name (the last one, as Go's `pkix.Name` keeps it; empty when
    /// there is none).
    pub common_name: String,
    /// The subject's organizations, in order.
    pub organizations: Vec<String>,
}

// DER tags.
const BOOLEAN: u8 = 0x01;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const OCTET_STRING: u8 = 0x04;
const OID: u8 = 0x06;
const UTF8_STRING: u8 = 0x0c;
const PRINTABLE_STRING: u8 = 0x13;
const T61_STRING: u8 = 0x14;
const IA5_STRING: u8 = 0x16;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
const UNIVERSAL_STRING: u8 = 0x1c;
const BMP_STRING: u8 = 0x1e;
const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
/// `[0] EXPLICIT` (the version).
const CONTEXT_0: u8 = 0xa0;
/// `[3] EXPLICIT` (the extensions).
const CONTEXT_3: u8 = 0xa3;
/// GeneralName `dNSName [2] IA5String`.
const SAN_DNS: u8 = 0x82;
/// GeneralName `iPAddress [7] OCTET STRING`.
const SAN_IP: u8 = 0x87;

// Object identifiers, as their DER contents.
/// ecdsa-with-SHA256 (1.2.840.10045.4.3.2).
const OID_ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
/// id-ecPublicKey (1.2.840.10045.2.1).
const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// prime256v1 (1.2.840.10045.3.1.7).
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// commonName (2.5.4.3).
const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
/// organizationName (2.5.4.10).
const OID_O: &[u8] = &[0x55, 0x04, 0x0a];
/// basicConstraints (2.5.29.19).
const OID_BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];
/// keyUsage (2.5.29.15).
const OID_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x0f];
/// extKeyUsage (2.5.29.37).
const OID_EXT_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25];
/// subjectAltName (2.5.29.17).
const OID_SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];
/// PKCS#9 extensionRequest (1.2.840.113549.1.9.14).
const OID_EXTENSION_REQUEST: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e];
/// id-kp-serverAuth (1.3.6.1.5.5.7.3.1).
const OID_SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];

/// A new ECDSA P-256 key and an X.509 v3 certificate for it, signed by itself (SHA-256):
/// issuer and subject `CN=<common_name>`, a random positive 16-byte serial, valid from
/// `not_before` (to the second) for `valid_for`, with a subjectAltName of `dns_names` and
/// `ips` (left out when both are empty), basicConstraints CA:FALSE, keyUsage
/// digitalSignature (critical) and extKeyUsage serverAuth.
pub fn self_signed(
    common_name: &str,
    dns_names: &[String],
    ips: &[IpAddr],
    not_before: SystemTime,
    valid_for: Duration,
) -> Result<SelfSigned, X509Error> {
    check_names(common_name, dns_names, ips)?;
    let not_after = not_before.checked_add(valid_for).ok_or(X509Error::ValidityRange { what: "notAfter" })?;
    let validity = tlv(SEQUENCE, &[&der_time(not_before, "notBefore")?, &der_time(not_after, "notAfter")?]);

    let rng = SystemRandom::new();
    let (pkcs8, key) = new_key(&rng)?;
    let mut serial = [0u8; 16];
    rng.fill(&mut serial).map_err(|_| X509Error::Crypto { step: "draw a random serial number" })?;
    // Positive (top bit clear) and minimal DER (first byte not zero): 16 bytes exactly.
    serial[0] = (serial[0] & 0x7f).max(1);

    let tbs = tbs_certificate(&serial, common_name, &validity, key.public_key().as_ref(), dns_names, ips);
    let signature = key.sign(&rng, &tbs).map_err(|_| X509Error::Crypto { step: "sign the certificate" })?;
    let cert = tlv(SEQUENCE, &[&tbs, &signature_algorithm(), &bit_string(signature.as_ref())]);
    Ok(SelfSigned { cert_pem: pem("CERTIFICATE", &cert), key_pem: pem("PRIVATE KEY", pkcs8.as_ref()) })
}

/// A new ECDSA P-256 key (PKCS#8) and the key pair to sign with.
fn new_key(rng: &SystemRandom) -> Result<(ring::pkcs8::Document, EcdsaKeyPair), X509Error> {
    let alg = &ECDSA_P256_SHA256_ASN1_SIGNING;
    let pkcs8 =
        EcdsaKeyPair::generate_pkcs8(alg, rng).map_err(|_| X509Error::Crypto { step: "generate a P-256 key" })?;
    let key = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), rng)
        .map_err(|_| X509Error::Crypto { step: "load the generated P-256 key" })?;
    Ok((pkcs8, key))
}

/// A new ECDSA P-256 key and a PKCS#10 certificate signing request for it (see
/// `certificate_request_for_key`).
pub fn certificate_request(
    common_name: &str,
    organizations: &[&str],
    dns_names: &[String],
    ips: &[IpAddr],
) -> Result<CertificateRequest, X509Error> {
    let (pkcs8, _) = new_key(&SystemRandom::new())?;
    certificate_request_for_key(pkcs8.as_ref(), common_name, organizations, dns_names, ips)
}

/// A PKCS#10 certificate signing request (SHA-256) for the ECDSA P-256 key `pkcs8` (DER),
/// as kubelet files one with the cluster's CSR API: subject `O=<each of organizations>,
/// CN=<common_name>` (`O=system:nodes, CN=system:node:<name>` for a node), and, when
/// `dns_names` or `ips` are given, an extensionRequest for that subjectAltName (a serving
/// certificate's). The key never leaves the caller.
pub fn certificate_request_for_key(
    pkcs8: &[u8],
    common_name: &str,
    organizations: &[&str],
    dns_names: &[String],
    ips: &[IpAddr],
) -> Result<CertificateRequest, X509Error> {
    check_names(common_name, dns_names, ips)?;
    if let Some(bad) =
        organizations.iter().find(|o| o.is_empty() || o.len() > MAX_COMMON_NAME || o.chars().any(char::is_control))
    {
        return Err(X509Error::CommonName { name: cut(bad, 80) });
    }
    let rng = SystemRandom::new();
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8, &rng)
        .map_err(|_| X509Error::Crypto { step: "load the P-256 key" })?;
    let rdn = |oid: &[u8], value: &str| {
        tlv(SET, &[&tlv(SEQUENCE, &[&tlv(OID, &[oid]), &tlv(UTF8_STRING, &[value.as_bytes()])])])
    };
    let mut rdns: Vec<Vec<u8>> = organizations.iter().map(|o| rdn(OID_O, o)).collect();
    rdns.push(rdn(OID_CN, common_name));
    let rdns: Vec<&[u8]> = rdns.iter().map(Vec::as_slice).collect();
    let attributes = match subject_alt_name(dns_names, ips) {
        Some(san) => {
            let extensions = tlv(SEQUENCE, &[&san]);
            tlv(CONTEXT_0, &[&tlv(SEQUENCE, &[&tlv(OID, &[OID_EXTENSION_REQUEST]), &tlv(SET, &[&extensions])])])
        }
        None => tlv(CONTEXT_0, &[]),
    };
    let public_key_info = public_key_info(key.public_key().as_ref());
    let info = tlv(SEQUENCE, &[&tlv(INTEGER, &[&[0]]), &tlv(SEQUENCE, &rdns), &public_key_info, &attributes]);
    let signature = key.sign(&rng, &info).map_err(|_| X509Error::Crypto { step: "sign the request" })?;
    let csr = tlv(SEQUENCE, &[&info, &signature_algorithm(), &bit_string(signature.as_ref())]);
    Ok(CertificateRequest {
        csr_pem: pem("CERTIFICATE REQUEST", &csr),
        key_pem: private_key_pem(pkcs8),
        public_key_info,
    })
}

/// A PKCS#8 private key (DER) as PEM (`PRIVATE KEY`).
pub fn private_key_pem(pkcs8: &[u8]) -> String {
    pem("PRIVATE KEY", pkcs8)
}

/// A new ECDSA P-256 private key, PKCS#8 DER (for `certificate_request_for_key`).
pub fn new_private_key() -> Result<Vec<u8>, X509Error> {
    Ok(new_key(&SystemRandom::new())?.0.as_ref().to_vec())
}

/// The subject of a DER certificate: its CN and every O (see `Identity`).
pub fn subject_identity(cert_der: &[u8]) -> Result<Identity, X509Error> {
    let tbs = TbsFields::read(cert_der)?;
    let mut identity = Identity::default();
    let mut rdns = Reader::new(tbs.subject);
    while !rdns.is_empty() {
        let mut attributes = Reader::new(rdns.expect(SET, "a subject RDN that is not a SET")?);
        while !attributes.is_empty() {
            let mut attribute = Reader::new(attributes.expect(SEQUENCE, "a subject attribute that is not a SEQUENCE")?);
            let oid = attribute.expect(OID, "a subject attribute without a type")?;
            let (tag, value) = attribute.read()?;
            attribute.end("a subject attribute with more than a type and a value")?;
            if oid == OID_CN {
                identity.common_name = decode_string(tag, value)?;
            } else if oid == OID_O {
                identity.organizations.push(decode_string(tag, value)?);
            }
        }
    }
    Ok(identity)
}

/// The validity of a DER certificate: (notBefore, notAfter).
pub fn validity(cert_der: &[u8]) -> Result<(SystemTime, SystemTime), X509Error> {
    let tbs = TbsFields::read(cert_der)?;
    let mut times = Reader::new(tbs.validity);
    let (tag, not_before) = times.read()?;
    let not_before = parse_time(tag, not_before)?;
    let (tag, not_after) = times.read()?;
    let not_after = parse_time(tag, not_after)?;
    times.end("a validity with more than two times")?;
    Ok((not_before, not_after))
}

/// The subjectAltName of a DER certificate: its DNS names and IP addresses, in order
/// (other kinds of names are passed over; none when it has no such extension).
pub fn subject_alt_names(cert_der: &[u8]) -> Result<(Vec<String>, Vec<IpAddr>), X509Error> {
    let tbs = TbsFields::read(cert_der)?;
    let (mut dns, mut ips) = (Vec::new(), Vec::new());
    let Some(extensions) = tbs.extensions()? else { return Ok((dns, ips)) };
    let mut list = Reader::new(Reader::new(extensions).expect(SEQUENCE, "extensions that are not a SEQUENCE")?);
    while !list.is_empty() {
        let mut ext = Reader::new(list.expect(SEQUENCE, "an extension that is not a SEQUENCE")?);
        let oid = ext.expect(OID, "an extension without an OID")?;
        if ext.peek() == Some(BOOLEAN) {
            ext.read()?;
        }
        let value = ext.expect(OCTET_STRING, "an extension without a value")?;
        if oid != OID_SUBJECT_ALT_NAME {
            continue;
        }
        let mut names = Reader::new(Reader::new(value).expect(SEQUENCE, "a subjectAltName that is not a SEQUENCE")?);
        while !names.is_empty() {
            match names.read()? {
                (SAN_DNS, name) => dns.push(
                    std::str::from_utf8(name).map_err(|_| X509Error::StringValue { kind: "dNSName" })?.to_string(),
                ),
                (SAN_IP, ip) => ips.push(match ip.len() {
                    4 => IpAddr::from(<[u8; 4]>::try_from(ip).unwrap_or_default()),
                    16 => IpAddr::from(<[u8; 16]>::try_from(ip).unwrap_or_default()),
                    _ => return Err(X509Error::Malformed { what: "an iPAddress of neither 4 nor 16 bytes" }),
                }),
                _ => {}
            }
        }
    }
    Ok((dns, ips))
}

/// `common_name`, `dns_names` and `ips` checked against the bounds `self_signed` keeps.
fn check_names(common_name: &str, dns_names: &[String], ips: &[IpAddr]) -> Result<(), X509Error> {
    if common_name.is_empty() || common_name.len() > MAX_COMMON_NAME || common_name.chars().any(char::is_control) {
        return Err(X509Error::CommonName { name: cut(common_name, 80) });
    }
    let count = dns_names.len() + ips.len();
    if count > MAX_ALT_NAMES {
        return Err(X509Error::TooManyNames { count });
    }
    match dns_names.iter().find(|n| !valid_dns_name(n)) {
        Some(bad) => Err(X509Error::DnsName { name: cut(bad, 80) }),
        None => Ok(()),
    }
}

/// Whether `name` is a DNS name a certificate may hold: labels of letters, digits, `-` and
/// `_` (found in some host names), optionally after a `*.` wildcard.
fn valid_dns_name(name: &str) -> bool {
    let body = name.strip_prefix("*.").unwrap_or(name);
    !body.is_empty()
        && name.len() <= MAX_DNS_NAME
        && body.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// At most `max` bytes of `s`, on a character boundary.
fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The TBSCertificate: v3, `serial`, ecdsa-with-SHA256, issuer and subject `CN=<cn>`,
/// `validity` (an encoded Validity), the P-256 `public_key` (uncompressed point), and the
/// extensions.
fn tbs_certificate(
    serial: &[u8],
    cn: &str,
    validity: &[u8],
    public_key: &[u8],
    dns_names: &[String],
    ips: &[IpAddr],
) -> Vec<u8> {
    let version = tlv(CONTEXT_0, &[&tlv(INTEGER, &[&[2]])]);
    let name =
        tlv(SEQUENCE, &[&tlv(SET, &[&tlv(SEQUENCE, &[&tlv(OID, &[OID_CN]), &tlv(UTF8_STRING, &[cn.as_bytes()])])])]);
    let spki = public_key_info(public_key);

    let mut extensions = vec![
        // CA:FALSE is the default, so the value is an empty SEQUENCE; critical as Go writes it.
        extension(OID_BASIC_CONSTRAINTS, true, &tlv(SEQUENCE, &[])),
        // digitalSignature is bit 0: one byte 0x80 with 7 unused bits.
        extension(OID_KEY_USAGE, true, &tlv(BIT_STRING, &[&[7, 0x80]])),
        extension(OID_EXT_KEY_USAGE, false, &tlv(SEQUENCE, &[&tlv(OID, &[OID_SERVER_AUTH])])),
    ];
    extensions.extend(subject_alt_name(dns_names, ips));
    let extensions: Vec<&[u8]> = extensions.iter().map(Vec::as_slice).collect();
    let extensions = tlv(CONTEXT_3, &[&tlv(SEQUENCE, &extensions)]);

    tlv(
        SEQUENCE,
        &[&version, &tlv(INTEGER, &[serial]), &signature_algorithm(), &name, validity, &name, &spki, &extensions],
    )
}

/// A P-256 SubjectPublicKeyInfo.
fn public_key_info(public_key: &[u8]) -> Vec<u8> {
    let algorithm = tlv(SEQUENCE, &[&tlv(OID, &[OID_EC_PUBLIC_KEY]), &tlv(OID, &[OID_P256])]);
    tlv(SEQUENCE, &[&algorithm, &bit_string(public_key)])
}

/// The subjectAltName extension of `dns_names` and `ips`; `None` when both are empty.
fn subject_alt_name(dns_names: &[String], ips: &[IpAddr]) -> Option<Vec<u8>> {
    if dns_names.is_empty() && ips.is_empty() {
        return None;
    }
    let mut names: Vec<Vec<u8>> = dns_names.iter().map(|n| tlv(SAN_DNS, &[n.as_bytes()])).collect();
    names.extend(ips.iter().map(|ip| match ip {
        IpAddr::V4(v4) => tlv(SAN_IP, &[&v4.octets()]),
        IpAddr::V6(v6) => tlv(SAN_IP, &[&v6.octets()]),
    }));
    let names: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
    Some(extension(OID_SUBJECT_ALT_NAME, false, &tlv(SEQUENCE, &names)))
}

/// AlgorithmIdentifier ecdsa-with-SHA256 (no parameters, RFC 5758).
fn signature_algorithm() -> Vec<u8> {
    tlv(SEQUENCE, &[&tlv(OID, &[OID_ECDSA_SHA256])])
}

/// An Extension: its OID, `critical` when set (FALSE is the default, left out in DER), and
/// `value` (encoded) in an OCTET STRING.
fn extension(oid: &[u8], critical: bool, value: &[u8]) -> Vec<u8> {
    let flag = if critical { tlv(BOOLEAN, &[&[0xff]]) } else { Vec::new() };
    tlv(SEQUENCE, &[&tlv(OID, &[oid]), &flag, &tlv(OCTET_STRING, &[value])])
}

/// A BIT STRING of whole bytes.
fn bit_string(bytes: &[u8]) -> Vec<u8> {
    tlv(BIT_STRING, &[&[0], bytes])
}

/// One DER element: `tag`, the definite length, and `parts` concatenated.
fn tlv(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut out = Vec::with_capacity(len + 6);
    out.push(tag);
    if len < 0x80 {
        // Cannot truncate: below 0x80.
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        // Cannot truncate: a usize has at most 8 bytes.
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    for p in parts {
        out.extend_from_slice(p);
    }
    out
}

/// `der` as PEM with `label`, in lines of 64 characters.
fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        // Base64 is ASCII, and a chunk of ASCII is whole characters.
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// `t` (to the second) as a DER Time: UTCTime through 2049, GeneralizedTime from 2050
/// (RFC 5280 4.1.2.5).
fn der_time(t: SystemTime, what: &'static str) -> Result<Vec<u8>, X509Error> {
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).ok(),
        // Before 1970: round down to the second.
        Err(e) => {
            let d = e.duration();
            i64::try_from(d.as_secs() + u64::from(d.subsec_nanos() > 0)).ok().map(|s| -s)
        }
    };
    let secs = secs.ok_or(X509Error::ValidityRange { what })?;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    let (h, m, s) = (rest / 3600, rest / 60 % 60, rest % 60);
    match year {
        1950..=2049 => {
            Ok(tlv(UTC_TIME, &[format!("{:02}{month:02}{day:02}{h:02}{m:02}{s:02}Z", year % 100).as_bytes()]))
        }
        2050..=9999 => {
            Ok(tlv(GENERALIZED_TIME, &[format!("{year:04}{month:02}{day:02}{h:02}{m:02}{s:02}Z").as_bytes()]))
        }
        _ => Err(X509Error::ValidityRange { what }),
    }
}

/// A DER UTCTime (`YYMMDDHHMMSSZ`, 1950 to 2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn parse_time(tag: u8, text: &[u8]) -> Result<SystemTime, X509Error> {
    let bad = || X509Error::Time { text: String::from_utf8_lossy(&text[..text.len().min(32)]).into_owned() };
    let (year_digits, len) = match tag {
        UTC_TIME => (2, 13),
        GENERALIZED_TIME => (4, 15),
        _ => return Err(X509Error::Malformed { what: "a validity time that is neither UTCTime nor GeneralizedTime" }),
    };
    if text.len() != len || text[len - 1] != b'Z' || !text[..len - 1].iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let num = |from: usize, n: usize| text[from..from + n].iter().fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'));
    let mut year = num(0, year_digits);
    if tag == UTC_TIME {
        year += if year < 50 { 2000 } else { 1900 };
    }
    let at = year_digits;
    let (month, day, h, m, s) = (num(at, 2), num(at + 2, 2), num(at + 4, 2), num(at + 6, 2), num(at + 8, 2));
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) || h > 23 || m > 59 || s > 59 {
        return Err(bad());
    }
    let secs = days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + s;
    let offset = Duration::from_secs(secs.unsigned_abs());
    let t = if secs >= 0 { UNIX_EPOCH.checked_add(offset) } else { UNIX_EPOCH.checked_sub(offset) };
    t.ok_or_else(bad)
}

/// The days of `month` (1 to 12) in `year`.
fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The civil date of `days` since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A name attribute's value as text, by its string type (TeletexString read as Latin-1, as
/// Go reads it).
fn decode_string(tag: u8, value: &[u8]) -> Result<String, X509Error> {
    match tag {
        UTF8_STRING => String::from_utf8(value.to_vec()).map_err(|_| X509Error::StringValue { kind: "UTF8String" }),
        PRINTABLE_STRING | IA5_STRING if value.is_ascii() => Ok(value.iter().map(|b| char::from(*b)).collect()),
        PRINTABLE_STRING => Err(X509Error::StringValue { kind: "PrintableString" }),
        IA5_STRING => Err(X509Error::StringValue { kind: "IA5String" }),
        T61_STRING => Ok(value.iter().map(|b| char::from(*b)).collect()),
        BMP_STRING if value.len() % 2 == 0 => {
            let units: Vec<u16> = value.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
            String::from_utf16(&units).map_err(|_| X509Error::StringValue { kind: "BMPString" })
        }
        BMP_STRING => Err(X509Error::StringValue { kind: "BMPString" }),
        UNIVERSAL_STRING if value.len() % 4 == 0 => value
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
            .collect::<Option<String>>()
            .ok_or(X509Error::StringValue { kind: "UniversalString" }),
        UNIVERSAL_STRING => Err(X509Error::StringValue { kind: "UniversalString" }),
        _ => Err(X509Error::StringType { tag }),
    }
}

/// The TBSCertificate fields the readers need.
struct TbsFields<'a> {
    /// The Validity's contents.
    validity: &'a [u8],
    /// The subject Name's contents.
    subject: &'a [u8],
    /// What follows the subject (read only by `extensions`).
    rest: &'a [u8],
}

impl<'a> TbsFields<'a> {
    /// Walks a certificate to its subject (the fields after it are read on demand).
    fn read(cert_der: &'a [u8]) -> Result<TbsFields<'a>, X509Error> {
        if cert_der.len() > MAX_CERT_DER {
            return Err(X509Error::TooLarge { len: cert_der.len() });
        }
        let mut outer = Reader::new(cert_der);
        let cert = outer.expect(SEQUENCE, "not a SEQUENCE")?;
        outer.end("data after the certificate")?;
        let mut tbs = Reader::new(Reader::new(cert).expect(SEQUENCE, "no tbsCertificate")?);
        if tbs.peek() == Some(CONTEXT_0) {
            tbs.read()?;
        }
        tbs.expect(INTEGER, "no serialNumber")?;
        tbs.expect(SEQUENCE, "no signature algorithm")?;
        tbs.expect(SEQUENCE, "no issuer")?;
        let validity = tbs.expect(SEQUENCE, "no validity")?;
        let subject = tbs.expect(SEQUENCE, "no subject")?;
        Ok(TbsFields { validity, subject, rest: tbs.rest })
    }

    /// The `[3]` extensions' contents, when there are any.
    fn extensions(&self) -> Result<Option<&'a [u8]>, X509Error> {
        let mut tbs = Reader::new(self.rest);
        tbs.expect(SEQUENCE, "no subjectPublicKeyInfo")?;
        while !tbs.is_empty() {
            // issuerUniqueID [1], subjectUniqueID [2], extensions [3].
            let (tag, contents) = tbs.read()?;
            if tag == CONTEXT_3 {
                return Ok(Some(contents));
            }
        }
        Ok(None)
    }
}

/// Reads DER elements off a slice, one after another. Only definite lengths in their
/// shortest form and one-byte tags are accepted, as DER and X.509 have them.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader of `data`.
    fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { rest: data }
    }

    /// Whether everything has been read.
    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next element's tag, if any.
    fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    /// The next element: its tag and contents.
    fn read(&mut self) -> Result<(u8, &'a [u8]), X509Error> {
        let malformed = |what| Err(X509Error::Malformed { what });
        let (&tag, rest) = match self.rest.split_first() {
            Some(split) => split,
            None => return malformed("an element missing at the end of its parent"),
        };
        if tag & 0x1f == 0x1f {
            return malformed("a multi-byte tag");
        }
        let (&first, rest) = match rest.split_first() {
            Some(split) => split,
            None => return malformed("an element cut short in its length"),
        };
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 {
                return malformed("an indefinite length");
            }
            if n > 4 || rest.len() < n {
                return malformed("a length beyond its parent");
            }
            let len = rest[..n].iter().fold(0usize, |acc, b| acc << 8 | usize::from(*b));
            if rest[0] == 0 || len < 0x80 {
                return malformed("a length not in its shortest form");
            }
            (len, &rest[n..])
        };
        if rest.len() < len {
            return malformed("a length beyond its parent");
        }
        let (contents, rest) = rest.split_at(len);
        self.rest = rest;
        Ok((tag, contents))
    }

    /// The next element's contents, which must have `tag` (else `what` is the error).
    fn expect(&mut self, tag: u8, what: &'static str) -> Result<&'a [u8], X509Error> {
        match self.read() {
            Ok((t, contents)) if t == tag => Ok(contents),
            Ok(_) => Err(X509Error::Malformed { what }),
            Err(e) => Err(e),
        }
    }

    /// Ok when everything has been read (else `what` is the error).
    fn end(&self, what: &'static str) -> Result<(), X509Error> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(X509Error::Malformed { what })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;

    fn der_of(pem: &str) -> Vec<u8> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap().to_vec()
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_self_signed_certificate_reads_back_its_subject_and_validity() {
        let names = vec!["node-a".to_string(), "localhost".to_string()];
        let ips: Vec<IpAddr> = vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
        // 2024-01-02T03:04:05Z, valid a year.
        let from = at(1_704_164_645);
        let made = self_signed("node-a@1704164645", &names, &ips, from, Duration::from_secs(365 * 86_400)).unwrap();
        assert!(made.cert_pem.starts_with("-----BEGIN CERTIFICATE-----\n"), "{}", made.cert_pem);
        assert!(made.key_pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
        assert!(made.cert_pem.lines().all(|l| l.len() <= 64));
        let der = der_of(&made.cert_pem);
        let id = subject_identity(&der).unwrap();
        assert_eq!(id, Identity { common_name: "node-a@1704164645".into(), organizations: vec![] });
        assert_eq!(validity(&der).unwrap(), (from, at(1_704_164_645 + 365 * 86_400)));
        // The key is the certificate's, and webpki takes the certificate as it is.
        let cert = CertificateDer::from(der.clone());
        let parsed = rustls::server::ParsedCertificate::try_from(&cert).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(made.key_pem.as_bytes()).expect("a PKCS#8 key PEM");
        let signing = rustls::crypto::ring::default_provider().key_provider.load_private_key(key).unwrap();
        assert_eq!(signing.public_key().unwrap().as_ref(), parsed.subject_public_key_info().as_ref());
        assert!(format!("{made:?}").contains("cert_pem") && !format!("{made:?}").contains("PRIVATE KEY"));
    }

    #[test]
    fn two_certificates_have_different_keys_and_serials() {
        let a = self_signed("a", &[], &[], at(0), Duration::from_secs(60)).unwrap();
        let b = self_signed("a", &[], &[], at(0), Duration::from_secs(60)).unwrap();
        assert_ne!(a.key_pem, b.key_pem);
        let serial = |pem: &str| {
            let der = der_of(pem);
            let mut outer = Reader::new(&der);
            let mut cert = Reader::new(outer.expect(SEQUENCE, "").unwrap());
            let mut tbs = Reader::new(cert.expect(SEQUENCE, "").unwrap());
            tbs.read().unwrap();
            tbs.expect(INTEGER, "").unwrap().to_vec()
        };
        let (sa, sb) = (serial(&a.cert_pem), serial(&b.cert_pem));
        assert_ne!(sa, sb);
        for s in [sa, sb] {
            assert_eq!(s.len(), 16);
            assert!(s[0] != 0 && s[0] < 0x80, "positive and minimal: {s:?}");
        }
    }

    #[test]
    fn times_are_utc_time_until_2049_and_generalized_time_from_2050() {
        // 2049-12-31T23:59:59Z and 2050-01-01T00:00:00Z.
        let last_utc = at(2_524_607_999);
        assert_eq!(der_time(last_utc, "t").unwrap(), tlv(UTC_TIME, &[b"491231235959Z"]));
        assert_eq!(der_time(at(2_524_608_000), "t").unwrap(), tlv(GENERALIZED_TIME, &[b"20500101000000Z"]));
        assert_eq!(der_time(at(0), "t").unwrap(), tlv(UTC_TIME, &[b"700101000000Z"]));
        // 1969-12-31T23:59:59.5Z rounds down to the second.
        let before_epoch = UNIX_EPOCH - Duration::from_millis(500);
        assert_eq!(der_time(before_epoch, "t").unwrap(), tlv(UTC_TIME, &[b"691231235959Z"]));
        assert!(matches!(
            der_time(UNIX_EPOCH - Duration::from_secs(21 * 365 * 86_400), "notBefore"),
            Err(X509Error::ValidityRange { what: "notBefore" })
        ));
        let made = self_signed("late", &[], &[], last_utc, Duration::from_secs(1)).unwrap();
        assert_eq!(validity(&der_of(&made.cert_pem)).unwrap(), (last_utc, at(2_524_608_000)));
        let far = self_signed("far", &[], &[], at(0), Duration::from_secs(10_000 * 365 * 86_400));
        assert!(matches!(far, Err(X509Error::ValidityRange { what: "notAfter" })), "{far:?}");
    }

    #[test]
    fn parsed_times_are_checked_field_by_field() {
        assert_eq!(parse_time(UTC_TIME, b"000229120000Z").unwrap(), at(951_825_600));
        assert_eq!(
            parse_time(GENERALIZED_TIME, b"19500101000000Z").unwrap(),
            UNIX_EPOCH - Duration::from_secs(631_152_000)
        );
        assert_eq!(parse_time(UTC_TIME, b"500101000000Z").unwrap(), UNIX_EPOCH - Duration::from_secs(631_152_000));
        for bad in [&b"010229120000Z"[..], b"001301000000Z", b"000101240000Z", b"0001010000Z", b"000101000000+0100"] {
            let e = parse_time(UTC_TIME, bad).unwrap_err().to_string();
            assert!(e.starts_with("validity time"), "{e}");
        }
        assert!(parse_time(GENERALIZED_TIME, b"20500101000000.5Z").is_err());
        for days in [-719_468, -1, 0, 59, 10_957, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn names_are_bounded_and_checked() {
        let t = at(0);
        let d = Duration::from_secs(60);
        let long = "x".repeat(MAX_COMMON_NAME + 1);
        for cn in ["", "a\nb", long.as_str()] {
            assert!(matches!(self_signed(cn, &[], &[], t, d), Err(X509Error::CommonName { .. })), "{cn:?}");
        }
        for dns in ["", "a..b", "node a", "node-a.", "*.", "a.*.b", &format!("{}.b", "a".repeat(64))] {
            let e = self_signed("cn", &[dns.to_string()], &[], t, d).unwrap_err();
            assert!(matches!(e, X509Error::DnsName { .. }), "{dns:?}: {e}");
        }
        for dns in ["*.example.com", "node_1.local", "A-1"] {
            self_signed("cn", &[dns.to_string()], &[], t, d).unwrap();
        }
        let many: Vec<IpAddr> = (0..=MAX_ALT_NAMES).map(|i| IpAddr::from([10, 0, (i / 256) as u8, i as u8])).collect();
        let e = self_signed("cn", &[], &many, t, d).unwrap_err().to_string();
        assert_eq!(e, "129 DNS names and IPs: at most 128 are allowed");
    }

    /// One subject attribute: its type's OID, its value's tag, and the value.
    type Attribute<'a> = (&'a [u8], u8, &'a [u8]);

    /// A certificate whose subject is `rdns` (each a SET of attributes), with placeholder
    /// fields around it.
    fn cert_with_subject(rdns: &[&[Attribute]]) -> Vec<u8> {
        let sets: Vec<Vec<u8>> = rdns
            .iter()
            .map(|atvs| {
                let atvs: Vec<Vec<u8>> = atvs
                    .iter()
                    .map(|(oid, tag, value)| tlv(SEQUENCE, &[&tlv(OID, &[oid]), &tlv(*tag, &[value])]))
                    .collect();
                let atvs: Vec<&[u8]> = atvs.iter().map(Vec::as_slice).collect();
                tlv(SET, &atvs)
            })
            .collect();
        let sets: Vec<&[u8]> = sets.iter().map(Vec::as_slice).collect();
        let validity =
            tlv(SEQUENCE, &[&tlv(UTC_TIME, &[b"700101000000Z"]), &tlv(GENERALIZED_TIME, &[b"20500101000000Z"])]);
        let tbs = tlv(
            SEQUENCE,
            &[&tlv(INTEGER, &[&[1]]), &signature_algorithm(), &tlv(SEQUENCE, &[]), &validity, &tlv(SEQUENCE, &sets)],
        );
        tlv(SEQUENCE, &[&tbs, &signature_algorithm(), &bit_string(&[])])
    }

    #[test]
    fn the_subject_gives_the_last_cn_and_every_o_in_their_string_types() {
        let der = cert_with_subject(&[
            &[(&[0x55, 0x04, 0x06], PRINTABLE_STRING, b"DE")],
            &[(OID_O, UTF8_STRING, "dévs".as_bytes()), (OID_O, PRINTABLE_STRING, b"ops")],
            &[(OID_CN, IA5_STRING, b"first")],
            &[(OID_O, BMP_STRING, &[0, b'q', 0, b'a'])],
            &[(OID_O, T61_STRING, &[b'x', 0xe9])],
            &[(OID_CN, UNIVERSAL_STRING, &[0, 0, 0, b'b', 0, 0, 0, b'o', 0, 0, 0, b'b'])],
        ]);
        let id = subject_identity(&der).unwrap();
        assert_eq!(id.common_name, "bob");
        assert_eq!(id.organizations, ["dévs", "ops", "qa", "xé"]);
        assert_eq!(validity(&der).unwrap(), (UNIX_EPOCH, at(2_524_608_000)));
        assert_eq!(subject_identity(&cert_with_subject(&[])).unwrap(), Identity::default());
    }

    #[test]
    fn bad_strings_and_bad_der_are_errors_not_panics() {
        let bad_utf8 = cert_with_subject(&[&[(OID_CN, UTF8_STRING, &[0xff])]]);
        assert_eq!(
            subject_identity(&bad_utf8).unwrap_err().to_string(),
            "a subject attribute that is not valid UTF8String"
        );
        let octets = cert_with_subject(&[&[(OID_O, OCTET_STRING, b"x")]]);
        assert!(matches!(subject_identity(&octets), Err(X509Error::StringType { tag: OCTET_STRING })));
        // Another attribute's value is never decoded.
        subject_identity(&cert_with_subject(&[&[(&[0x55, 0x04, 0x0b], OCTET_STRING, b"x")]])).unwrap();

        let good = cert_with_subject(&[&[(OID_CN, UTF8_STRING, b"alice")]]);
        // Every truncation fails cleanly.
        for n in 0..good.len() {
            assert!(subject_identity(&good[..n]).is_err(), "cut at {n}");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(
            subject_identity(&trailing).unwrap_err().to_string(),
            "malformed certificate: data after the certificate"
        );
        assert!(matches!(subject_identity(&vec![0; MAX_CERT_DER + 1]), Err(X509Error::TooLarge { .. })));
        for bad in [
            &[0x30, 0x80, 0, 0][..],
            &[0x30, 0x81, 0x05],
            &[0x30, 0x85, 1, 0, 0, 0, 0],
            &[0x3f, 0x01, 0x00],
            &[0x30, 0x02],
        ] {
            assert!(matches!(subject_identity(bad), Err(X509Error::Malformed { .. })), "{bad:?}");
        }
        // Arbitrary bytes never panic.
        let mut x: u32 = 7;
        for _ in 0..2000 {
            let mut data = good.clone();
            for _ in 0..3 {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                let i = (x >> 8) as usize % data.len();
                data[i] = (x >> 16) as u8;
            }
            let _ = subject_identity(&data);
            let _ = validity(&data);
        }
    }

    #[test]
    fn long_lengths_are_written_in_their_shortest_form_and_read_back() {
        let big = vec![7u8; 300];
        let encoded = tlv(OCTET_STRING, &[&big]);
        assert_eq!(&encoded[..4], &[OCTET_STRING, 0x82, 0x01, 0x2c]);
        let mut r = Reader::new(&encoded);
        assert_eq!(r.read().unwrap(), (OCTET_STRING, &big[..]));
        assert!(r.is_empty());
        assert_eq!(&tlv(OCTET_STRING, &[&[1; 200]])[..3], &[OCTET_STRING, 0x81, 200]);
    }

    #[test]
    fn a_node_certificate_request_verifies_and_names_its_subject_and_alt_names() {
        let ips = ["10.0.0.7".parse().unwrap()];
        let req = certificate_request("system:node:edge1", &["system:nodes"], &["edge1".to_string()], &ips).unwrap();
        assert!(req.csr_pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----\n"));
        assert!(req.key_pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
        assert!(certificate_request("", &["system:nodes"], &[], &[]).is_err(), "no common name");
        assert!(certificate_request("x", &[""], &[], &[]).is_err(), "an empty organization");
        // OpenSSL checks the self-signature and prints what it read, where it is installed.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.csr");
        std::fs::write(&file, &req.csr_pem).unwrap();
        let out = match std::process::Command::new("openssl")
            .args(["req", "-verify", "-noout", "-text", "-in"])
            .arg(&file)
            .output()
        {
            Ok(out) => out,
            Err(e) => return eprintln!("skipping the OpenSSL check: {e}"),
        };
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("verify OK") || text.contains("Certificate request self-signature verify OK"), "{text}");
        assert!(text.contains("O = system:nodes, CN = system:node:edge1"), "{text}");
        assert!(text.contains("DNS:edge1, IP Address:10.0.0.7"), "{text}");
        assert!(text.contains("ecdsa-with-SHA256") && text.contains("prime256v1"), "{text}");
    }

    #[test]
    fn a_request_for_a_kept_key_carries_that_key_and_the_alt_names_read_back() {
        let key = new_private_key().unwrap();
        let a = certificate_request_for_key(&key, "system:node:n", &["system:nodes"], &[], &[]).unwrap();
        let b = certificate_request_for_key(&key, "system:node:n", &["system:nodes"], &[], &[]).unwrap();
        assert_eq!(a.public_key_info, b.public_key_info, "the same key, so the same digested CSR name");
        let other = certificate_request("system:node:n", &["system:nodes"], &[], &[]).unwrap();
        assert_ne!(a.public_key_info, other.public_key_info);
        assert!(certificate_request_for_key(b"not a key", "x", &[], &[], &[]).is_err());
        let ips: Vec<IpAddr> = vec!["10.0.0.7".parse().unwrap(), "fd00::7".parse().unwrap()];
        let names = vec!["edge-1".to_string(), "edge-1.local".to_string()];
        let made = self_signed("edge-1", &names, &ips, SystemTime::now(), Duration::from_secs(60)).unwrap();
        assert_eq!(subject_alt_names(&der_of(&made.cert_pem)).unwrap(), (names, ips));
        let bare = self_signed("edge-1", &[], &[], SystemTime::now(), Duration::from_secs(60)).unwrap();
        assert_eq!(subject_alt_names(&der_of(&bare.cert_pem)).unwrap(), (vec![], vec![]));
    }
}
