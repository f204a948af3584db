//! CertificateSigningRequests (`certificates.k8s.io/v1`) as kubelet files them, and what
//! an answer says about one. Pure.

use super::Kind;
use base64::Engine;
use serde_json::{json, Value};

/// Where CSRs are.
pub const PATH: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// The CSR object for `request_pem` of `kind`: named `name`, or `csr-` and a suffix the
/// apiserver picks (`generateName`).
pub fn object(name: Option<&str>, request_pem: &str, kind: Kind) -> Value {
    let metadata = match name {
        Some(n) => json!({"name": n}),
        None => json!({"generateName": "csr-"}),
    };
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": metadata,
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(request_pem),
            "signerName": kind.signer(),
            "usages": kind.usages(),
        },
    })
}

/// The name kubelet gives its bootstrap CSR: `node-csr-` and a digest of the public key,
/// the subject and the usages, so the same key asks under the same name after a restart
/// (and finds the CSR it filed before) instead of filing another.
pub fn digested_name(public_key_info: &[u8], common_name: &str, organizations: &[String], usages: &[&str]) -> String {
    let b64 = |data: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data);
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA512_256);
    // Each part base64url then `|`, a delimiter outside that alphabet: no two different
    // inputs write the same stream.
    let parts = std::iter::once(public_key_info)
        .chain(std::iter::once(common_name.as_bytes()))
        .chain(organizations.iter().map(|o| o.as_bytes()))
        .chain(usages.iter().map(|u| u.as_bytes()));
    for part in parts {
        ctx.update(b64(part).as_bytes());
        ctx.update(b"|");
    }
    format!("node-csr-{}", b64(ctx.finish().as_ref()))
}

/// Where a CSR is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not decided, or approved and not signed yet.
    Pending {
        /// Whether it was approved.
        approved: bool,
    },
    /// Signed: the certificate chain (PEM).
    Issued(Vec<u8>),
    /// Denied (by an approver or an operator).
    Denied {
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// The signer could not sign it.
    Failed {
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
    },
}

/// What the CSR `obj` says. A denial or a failure wins over a certificate.
pub fn outcome(obj: &Value) -> Result<Outcome, String> {
    let status = &obj["status"];
    let conditions = status["conditions"].as_array().map(Vec::as_slice).unwrap_or_default();
    let text = |c: &Value, k: &str| c[k].as_str().unwrap_or_default().to_string();
    let mut approved = false;
    for c in conditions {
        if c["status"].as_str().is_some_and(|s| s != "True") {
            continue;
        }
        match c["type"].as_str() {
            Some("Denied") => return Ok(Outcome::Denied { reason: text(c, "reason"), message: text(c, "message") }),
            Some("Failed") => return Ok(Outcome::Failed { reason: text(c, "reason"), message: text(c, "message") }),
            Some("Approved") => approved = true,
            _ => {}
        }
    }
    match status["certificate"].as_str().filter(|c| !c.is_empty()) {
        Some(b64) if approved => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map(Outcome::Issued)
            .map_err(|e| format!("status.certificate is not base64: {e}")),
        _ => Ok(Outcome::Pending { approved }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_object_names_the_signer_and_usages_and_carries_the_request() {
        let o = object(None, "-----BEGIN CERTIFICATE REQUEST-----\n", Kind::Client);
        assert_eq!(o["metadata"], json!({"generateName": "csr-"}));
        assert_eq!(o["spec"]["signerName"], "kubernetes.io/kube-apiserver-client-kubelet");
        assert_eq!(o["spec"]["usages"], json!(["digital signature", "client auth"]));
        assert_eq!(o["spec"]["request"], "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0K");
        assert!(o["spec"].get("expirationSeconds").is_none(), "the signer's duration, as kubelet");
        let o = object(Some("node-csr-x"), "r", Kind::Serving);
        assert_eq!(o["metadata"], json!({"name": "node-csr-x"}));
        assert_eq!(o["spec"]["usages"], json!(["digital signature", "server auth"]));
    }

    #[test]
    fn the_digested_name_depends_on_every_part_and_nothing_else() {
        let orgs = vec!["system:nodes".to_string()];
        let usages = Kind::Client.usages();
        let a = digested_name(b"key", "system:node:n", &orgs, &usages);
        assert_eq!(a, digested_name(b"key", "system:node:n", &orgs, &usages));
        assert!(a.starts_with("node-csr-") && a.len() == "node-csr-".len() + 43, "{a}");
        assert_ne!(a, digested_name(b"key2", "system:node:n", &orgs, &usages));
        assert_ne!(a, digested_name(b"key", "system:node:m", &orgs, &usages));
        assert_ne!(a, digested_name(b"key", "system:node:n", &[], &usages));
        // The delimiter keeps parts apart: CN "ab" + O "c" is not CN "a" + O "bc".
        assert_ne!(digested_name(b"k", "ab", &["c".into()], &[]), digested_name(b"k", "a", &["bc".into()], &[]));
    }

    #[test]
    fn the_outcome_reads_conditions_and_the_certificate() {
        assert_eq!(outcome(&json!({})).unwrap(), Outcome::Pending { approved: false });
        let approved = json!({"status": {"conditions": [{"type": "Approved", "status": "True"}]}});
        assert_eq!(outcome(&approved).unwrap(), Outcome::Pending { approved: true });
        let issued =
            json!({"status": {"conditions": [{"type": "Approved", "status": "True"}], "certificate": "Y2VydA=="}});
        assert_eq!(outcome(&issued).unwrap(), Outcome::Issued(b"cert".to_vec()));
        let denied = json!({"status": {"conditions": [
            {"type": "Denied", "status": "True", "reason": "NotMine", "message": "unknown device"}]}});
        assert_eq!(
            outcome(&denied).unwrap(),
            Outcome::Denied { reason: "NotMine".into(), message: "unknown device".into() }
        );
        let failed = json!({"status": {"conditions": [{"type": "Approved", "status": "True"},
            {"type": "Failed", "status": "True", "reason": "SignerValidationFailure", "message": "bad O"}],
            "certificate": "Y2VydA=="}});
        assert!(
            matches!(outcome(&failed).unwrap(), Outcome::Failed { reason, .. } if reason == "SignerValidationFailure")
        );
        let unapproved_cert = json!({"status": {"certificate": "Y2VydA=="}});
        assert_eq!(outcome(&unapproved_cert).unwrap(), Outcome::Pending { approved: false });
        let bad = json!({"status": {"conditions": [{"type": "Approved", "status": "True"}], "certificate": "%%"}});
        assert!(outcome(&bad).is_err());
        let not_true = json!({"status": {"conditions": [{"type": "Denied", "status": "False"}]}});
        assert_eq!(outcome(&not_true).unwrap(), Outcome::Pending { approved: false });
    }
}
