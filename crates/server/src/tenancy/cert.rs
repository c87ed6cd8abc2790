//! The one field of an X.509 certificate that names a tenant: the subject's
//! common name, or a subject alternative name (DNS, URI or email). A small
//! reader of DER (the encoding rustls hands over, already verified against
//! the client CA), for exactly these paths of RFC 5280:
//!
//! ```text
//! Certificate ::= SEQUENCE { tbsCertificate SEQUENCE {
//!   [0] version OPTIONAL, serialNumber, signature, issuer, validity,
//!   subject Name, subjectPublicKeyInfo, [1] [2] OPTIONAL,
//!   [3] extensions SEQUENCE OF Extension OPTIONAL }, ... }
//! Name ::= SEQUENCE OF SET OF SEQUENCE { type OID, value string }
//! Extension ::= SEQUENCE { extnID OID, critical BOOLEAN OPTIONAL, extnValue OCTET STRING }
//! GeneralNames ::= SEQUENCE OF GeneralName   -- [1] email, [2] DNS, [6] URI
//! ```

/// Which field names the tenant (`--tenant-cert-field`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum CertField {
    /// The subject's common name (CN).
    Cn,
    /// The first DNS name of the subject alternative names.
    SanDns,
    /// The first URI of the subject alternative names.
    SanUri,
    /// The first email address of the subject alternative names.
    SanEmail,
}

impl CertField {
    pub fn describe(self) -> &'static str {
        match self {
            CertField::Cn => "a subject common name (CN)",
            CertField::SanDns => "a DNS subject alternative name",
            CertField::SanUri => "a URI subject alternative name",
            CertField::SanEmail => "an email subject alternative name",
        }
    }
}

/// `commonName`, 2.5.4.3.
const CN: &[u8] = &[0x55, 0x04, 0x03];
/// `subjectAltName`, 2.5.29.17.
const SAN: &[u8] = &[0x55, 0x1d, 0x11];

/// One DER element: its tag, its contents, and what follows it.
fn element(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    if tag & 0x1f == 0x1f {
        return None; // high tag numbers: none on these paths
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |l, &b| (l << 8) | usize::from(b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The elements of a constructed element's contents.
fn elements(mut bytes: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let (tag, contents, rest) = element(bytes)?;
        bytes = rest;
        Some((tag, contents))
    })
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;

/// The value of `field` in the DER certificate `der`, if it has one that is
/// text.
pub fn field(der: &[u8], field: CertField) -> Option<String> {
    let (SEQUENCE, cert, _) = element(der)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = element(cert)? else {
        return None;
    };
    let mut parts = elements(tbs).peekable();
    // [0] version, when present.
    if parts.peek()?.0 == 0xa0 {
        parts.next();
    }
    // serialNumber, signature, issuer, validity; then subject.
    let mut parts = parts.skip(4);
    let (SEQUENCE, subject) = parts.next()? else {
        return None;
    };
    match field {
        CertField::Cn => common_name(subject),
        _ => {
            let tag = match field {
                CertField::SanEmail => 0x81,
                CertField::SanDns => 0x82,
                _ => 0x86,
            };
            // subjectPublicKeyInfo, [1], [2]; then [3] extensions.
            let (_, extensions) = parts.find(|(t, _)| *t == 0xa3)?;
            let (SEQUENCE, list, _) = element(extensions)? else {
                return None;
            };
            for (t, extension) in elements(list) {
                if t != SEQUENCE {
                    return None;
                }
                let mut items = elements(extension);
                let (OID, id) = items.next()? else {
                    return None;
                };
                if id != SAN {
                    continue;
                }
                let (OCTET_STRING, value) = items.find(|(t, _)| *t == OCTET_STRING)? else {
                    return None;
                };
                let (SEQUENCE, names, _) = element(value)? else {
                    return None;
                };
                return elements(names)
                    .find(|(t, _)| *t == tag)
                    .and_then(|(_, v)| String::from_utf8(v.to_vec()).ok());
            }
            None
        }
    }
}

/// The first common name of a `Name`.
fn common_name(name: &[u8]) -> Option<String> {
    for (tag, rdn) in elements(name) {
        if tag != SET {
            return None;
        }
        for (tag, pair) in elements(rdn) {
            if tag != SEQUENCE {
                return None;
            }
            let mut items = elements(pair);
            let (OID, id) = items.next()? else {
                return None;
            };
            if id == CN {
                // UTF8String, PrintableString, IA5String, ...: text.
                let (_, value) = items.next()?;
                return String::from_utf8(value.to_vec()).ok();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use rustls::pki_types::{pem::PemObject, CertificateDer};

    use super::*;

    /// Made with `openssl req -x509 -newkey ec ... -subj "/O=tracedb
    /// tests/CN=team-a" -addext "subjectAltName=DNS:team-dns,
    /// URI:spiffe://example.org/team-uri,email:team@example.org"`.
    const WITH_ALL: &str = "-----BEGIN CERTIFICATE-----
MIIB8DCCAZWgAwIBAgIUbZ2JoztAydgOFjn/mlVR5reT9bcwCgYIKoZIzj0EAwIw
KTEWMBQGA1UECgwNdHJhY2VkYiB0ZXN0czEPMA0GA1UEAwwGdGVhbS1hMB4XDTI2
MTEyNjE4MjAwNVoXDTM2MTEyMzE4MjAwNVowKTEWMBQGA1UECgwNdHJhY2VkYiB0
ZXN0czEPMA0GA1UEAwwGdGVhbS1hMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE
ExpmFjg3cxfQ4LXK0RsVM1FXzFc7WFiRoJurTM4T5ksevrIjv0BEKxJoKuzch0iO
oVtmzpAJb2vSXrLah0gNNKOBmjCBlzAdBgNVHQ4EFgQUrCxYN/Rnu7RgDpmZCjKY
ZX8s4/UwHwYDVR0jBBgwFoAUrCxYN/Rnu7RgDpmZCjKYZX8s4/UwDwYDVR0TAQH/
BAUwAwEB/zBEBgNVHREEPTA7ggh0ZWFtLWRuc4Ydc3BpZmZlOi8vZXhhbXBsZS5v
cmcvdGVhbS11cmmBEHRlYW1AZXhhbXBsZS5vcmcwCgYIKoZIzj0EAwIDSQAwRgIh
AMDHrsmcG/MwkdlU2na6FJv7S09RaskOVitQedP42mCmAiEA/Pdp9LyMy7A39+gK
XfleVSVbQYveS3xdf/fkhqSiRXw=
-----END CERTIFICATE-----
";

    /// `-subj "/O=no common name"`, no extensions of names.
    const WITH_NONE: &str = "-----BEGIN CERTIFICATE-----
MIIBhzCCAS2gAwIBAgIUFcc3r5ickgMw4iR/rq5XT3d3zZYwCgYIKoZIzj0EAwIw
GTEXMBUGA1UECgwObm8gY29tbW9uIG5hbWUwHhcNMjYxMTI2MTgyMDA1WhcNMzYx
MTIzMTgyMDA1WjAZMRcwFQYDVQQKDA5ubyBjb21tb24gbmFtZTBZMBMGByqGSM49
AgEGCCqGSM49AwEHA0IABHoXZT6e5tXZSAL/xovHysGLOYp+rJ18c1NRCK61bxtC
XPZBp2cHqEWvRbsKdbnxJU/53KlpukdBrQKpsLNWrB+jUzBRMB0GA1UdDgQWBBTN
F3c/9+mvi53lvbXReAovCcq5jTAfBgNVHSMEGDAWgBTNF3c/9+mvi53lvbXReAov
Ccq5jTAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0gAMEUCIQCFbDZm0iw+
WzkCJ4H/O2JzQS/TknCNf8GuP79jPGs9GAIgHGWiUlzDv2V64NgHpVEJPPKR4Uy4
to2hXiYfsaW2Tak=
-----END CERTIFICATE-----
";

    fn der(pem: &str) -> Vec<u8> {
        CertificateDer::from_pem_slice(pem.as_bytes())
            .expect("a PEM certificate")
            .to_vec()
    }

    #[test]
    fn each_field_of_a_certificate_is_read() {
        let all = der(WITH_ALL);
        assert_eq!(field(&all, CertField::Cn).as_deref(), Some("team-a"));
        assert_eq!(field(&all, CertField::SanDns).as_deref(), Some("team-dns"));
        assert_eq!(
            field(&all, CertField::SanUri).as_deref(),
            Some("spiffe://example.org/team-uri")
        );
        assert_eq!(
            field(&all, CertField::SanEmail).as_deref(),
            Some("team@example.org")
        );
        let none = der(WITH_NONE);
        for f in [
            CertField::Cn,
            CertField::SanDns,
            CertField::SanUri,
            CertField::SanEmail,
        ] {
            assert_eq!(field(&none, f), None, "{f:?}");
        }
        // Cut anywhere, nothing is read past the end.
        for cut in 0..all.len() {
            let _ = field(&all[..cut], CertField::SanEmail);
            let _ = field(&all[..cut], CertField::Cn);
        }
        assert_eq!(field(b"", CertField::Cn), None);
    }
}
