//! A kubeconfig file (kubectl's and kubelet's `--kubeconfig`), read as client-go reads it
//! for a node: the current context's cluster (server URL, CA file or data, or
//! `insecure-skip-tls-verify`) and user (client certificate and key, file or data; or a
//! bearer token, or a token file). Paths are relative to the kubeconfig's directory, as
//! kubectl resolves them. What a node agent cannot use (exec and auth-provider plugins, basic
//! auth) is refused by name, never ignored. Every problem names the file and the field.

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The most a kubeconfig, or a file it names, may hold.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// A problem with a kubeconfig: the file, the field and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("kubeconfig {}: {}{message}", file.display(), if field == "-" { String::new() } else { format!("{field}: ") })]
pub struct KubeconfigError {
    /// The kubeconfig.
    pub file: PathBuf,
    /// The field (`users[0].user.client-key`), or `-` for the file as a whole.
    pub field: String,
    /// What is wrong, with its cause.
    pub message: String,
}

/// How requests authenticate.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// A client certificate chain and its key (PEM): `system:node:<name>`, as kubelet.
    ClientCert {
        /// The certificate chain.
        cert: Vec<u8>,
        /// The private key.
        key: Vec<u8>,
    },
    /// A bearer token.
    Token(String),
    /// A bearer token read from this file at each request (it may be rotated).
    TokenFile(PathBuf),
    /// None (an apiserver that lets anonymous requests through; tests only).
    Anonymous,
}

impl std::fmt::Debug for Auth {
    // Never print a key or a token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::ClientCert { .. } => f.write_str("ClientCert"),
            Auth::Token(_) => f.write_str("Token"),
            Auth::TokenFile(p) => write!(f, "TokenFile({})", p.display()),
            Auth::Anonymous => f.write_str("Anonymous"),
        }
    }
}

/// Where the apiserver is and how to reach it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connection {
    /// `https://host:port`, without a trailing slash.
    pub server: String,
    /// The CA bundle (PEM) the server's certificate must chain to; `None`: the system's.
    pub ca: Option<Vec<u8>>,
    /// `insecure-skip-tls-verify`: the server is not verified.
    pub insecure: bool,
    /// How requests authenticate.
    pub auth: Auth,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "kebab-case")]
struct File {
    current_context: String,
    clusters: Vec<NamedCluster>,
    contexts: Vec<NamedContext>,
    users: Vec<NamedUser>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NamedCluster {
    name: String,
    cluster: Cluster,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NamedContext {
    name: String,
    context: Context,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NamedUser {
    name: String,
    user: serde_json::Map<String, serde_json::Value>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "kebab-case")]
struct Cluster {
    server: String,
    certificate_authority: String,
    certificate_authority_data: String,
    insecure_skip_tls_verify: bool,
    tls_server_name: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Context {
    cluster: String,
    user: String,
}

/// Reads the kubeconfig at `path`.
pub fn load(path: &Path) -> Result<Connection, KubeconfigError> {
    let text = crate::base::inputfile::read_to_string(path, MAX_FILE_BYTES).map_err(|e| KubeconfigError {
        file: path.into(),
        field: "-".into(),
        message: crate::base::errors::Chain(&e).to_string(),
    })?;
    // The files it names are PEM text, read as bounded as the kubeconfig.
    let read = |p: &Path| {
        crate::base::inputfile::read_to_string(p, MAX_FILE_BYTES)
            .map(String::into_bytes)
            .map_err(|e| crate::base::errors::Chain(&e).to_string())
    };
    parse(path, &text, &read)
}

/// The connection a kubeconfig's text describes; `read` reads the files it names (`path`
/// is the kubeconfig, whose directory relative paths start from).
pub fn parse(
    path: &Path,
    text: &str,
    read: &dyn Fn(&Path) -> Result<Vec<u8>, String>,
) -> Result<Connection, KubeconfigError> {
    let err = |field: &str, message: String| KubeconfigError { file: path.into(), field: field.into(), message };
    use crate::api::strict::{yaml_flow_too_deep, MAX_YAML_FLOW_DEPTH};
    if yaml_flow_too_deep(text, MAX_YAML_FLOW_DEPTH) {
        return Err(err(
            "-",
            format!("not a kubeconfig: flow collections nested more than {MAX_YAML_FLOW_DEPTH} levels"),
        ));
    }
    let file: File = serde_norway::from_str(text).map_err(|e| err("-", format!("not a kubeconfig: {e}")))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let resolve = |p: &str| if Path::new(p).is_absolute() { PathBuf::from(p) } else { base.join(p) };
    // The current context, or the only one there is.
    let ctx_index = if file.current_context.is_empty() {
        match file.contexts.len() {
            1 => 0,
            n => return Err(err("current-context", format!("must be set ({n} contexts)"))),
        }
    } else {
        file.contexts
            .iter()
            .position(|c| c.name == file.current_context)
            .ok_or_else(|| err("current-context", format!("{:?} is not one of the contexts", file.current_context)))?
    };
    let ctx = &file.contexts[ctx_index].context;
    let cf = format!("contexts[{ctx_index}].context");
    let ci = file
        .clusters
        .iter()
        .position(|c| c.name == ctx.cluster)
        .ok_or_else(|| err(&format!("{cf}.cluster"), format!("{:?} is not one of the clusters", ctx.cluster)))?;
    let cluster = &file.clusters[ci].cluster;
    let cl = format!("clusters[{ci}].cluster");
    let server = cluster.server.trim_end_matches('/').to_string();
    if !server.starts_with("https://") || server.len() <= "https://".len() {
        return Err(err(&format!("{cl}.server"), format!("{:?} must be an https:// URL", cluster.server)));
    }
    if !cluster.tls_server_name.is_empty() {
        return Err(err(
            &format!("{cl}.tls-server-name"),
            "is not supported: the server's certificate must name the host in `server`".into(),
        ));
    }
    let b64 = |field: &str, data: &str| base64_decode(data).ok_or_else(|| err(field, "is not valid base64".into()));
    let file_bytes = |field: &str, p: &str| {
        read(&resolve(p)).map_err(|e| err(field, format!("cannot read {}: {e}", resolve(p).display())))
    };
    let ca = match (cluster.certificate_authority_data.as_str(), cluster.certificate_authority.as_str()) {
        ("", "") => None,
        (data, "") => Some(b64(&format!("{cl}.certificate-authority-data"), data)?),
        ("", file) => Some(file_bytes(&format!("{cl}.certificate-authority"), file)?),
        _ => return Err(err(&cl, "sets both certificate-authority and certificate-authority-data".into())),
    };
    let ui = file
        .users
        .iter()
        .position(|u| u.name == ctx.user)
        .ok_or_else(|| err(&format!("{cf}.user"), format!("{:?} is not one of the users", ctx.user)))?;
    let user = &file.users[ui].user;
    let uf = format!("users[{ui}].user");
    let s = |key: &str| user.get(key).and_then(serde_json::Value::as_str).unwrap_or_default();
    for key in ["exec", "auth-provider", "username", "password"] {
        if user.get(key).is_some_and(|v| !v.is_null()) {
            return Err(err(
                &format!("{uf}.{key}"),
                "is not supported: use a client certificate (as kubelet does), a token or a token file".into(),
            ));
        }
    }
    let pair = |data_key: &str, file_key: &str| -> Result<Option<Vec<u8>>, KubeconfigError> {
        match (s(data_key), s(file_key)) {
            ("", "") => Ok(None),
            (data, "") => b64(&format!("{uf}.{data_key}"), data).map(Some),
            ("", f) => file_bytes(&format!("{uf}.{file_key}"), f).map(Some),
            _ => Err(err(&uf, format!("sets both {file_key} and {data_key}"))),
        }
    };
    let cert = pair("client-certificate-data", "client-certificate")?;
    let key = pair("client-key-data", "client-key")?;
    let auth = match (cert, key, s("token"), s("tokenFile")) {
        (Some(cert), Some(key), "", "") => Auth::ClientCert { cert, key },
        (Some(_), None, ..) => {
            return Err(err(&format!("{uf}.client-key"), "is required with a client certificate".into()))
        }
        (None, Some(_), ..) => {
            return Err(err(&format!("{uf}.client-certificate"), "is required with a client key".into()))
        }
        (None, None, "", "") => Auth::Anonymous,
        (None, None, token, "") => Auth::Token(token.to_string()),
        (None, None, "", f) => Auth::TokenFile(resolve(f)),
        _ => return Err(err(&uf, "sets more than one of a client certificate, token and tokenFile".into())),
    };
    Ok(Connection { server, ca, insecure: cluster.insecure_skip_tls_verify, auth })
}

/// The kubeconfig TLS bootstrap leaves, as kubelet writes it: `conn`'s server, its CA
/// inline (or `insecure-skip-tls-verify`), and a user whose certificate and key are both
/// in `pair_file` (the certificate store's current pair, renewed in place).
pub fn node_text(conn: &Connection, pair_file: &Path) -> String {
    use base64::Engine;
    let q = |s: &str| serde_json::Value::from(s).to_string();
    let trust = match (&conn.ca, conn.insecure) {
        (_, true) => "    insecure-skip-tls-verify: true\n".to_string(),
        (Some(ca), false) => {
            format!("    certificate-authority-data: {}\n", base64::engine::general_purpose::STANDARD.encode(ca))
        }
        (None, false) => String::new(),
    };
    let pair = q(&pair_file.to_string_lossy());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n{trust}    server: {server}\n  name: default-cluster\ncontexts:\n- context:\n    cluster: default-cluster\n    namespace: default\n    user: default-auth\n  name: default-context\ncurrent-context: default-context\npreferences: {{}}\nusers:\n- name: default-auth\n  user:\n    client-certificate: {pair}\n    client-key: {pair}\n",
        server = q(&conn.server),
    )
}

/// Standard base64 (with or without padding); `None` when it is not.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace()) {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => continue,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn files() -> HashMap<PathBuf, Vec<u8>> {
        HashMap::from([
            (PathBuf::from("/etc/ferrolet/pki/ca.crt"), b"CA PEM".to_vec()),
            (PathBuf::from("/etc/ferrolet/pki/node.crt"), b"CERT PEM".to_vec()),
            (PathBuf::from("/var/lib/ferrolet/node.key"), b"KEY PEM".to_vec()),
        ])
    }

    fn parse_text(text: &str) -> Result<Connection, String> {
        let f = files();
        let read =
            move |p: &Path| f.get(p).cloned().ok_or_else(|| "No such file or directory (os error 2)".to_string());
        parse(Path::new("/etc/ferrolet/kubeconfig"), text, &read).map_err(|e| e.to_string())
    }

    const NODE: &str = "apiVersion: v1\nkind: Config\ncurrent-context: node\nclusters:\n- name: edge\n  cluster:\n    server: https://10.0.0.1:6443/\n    certificate-authority: pki/ca.crt\ncontexts:\n- name: node\n  context: {cluster: edge, user: node1}\nusers:\n- name: node1\n  user:\n    client-certificate: pki/node.crt\n    client-key: /var/lib/ferrolet/node.key\npreferences: {}\n";

    #[test]
    fn a_node_kubeconfig_with_files_relative_to_it() {
        let c = parse_text(NODE).unwrap();
        assert_eq!(c.server, "https://10.0.0.1:6443");
        assert_eq!(c.ca.as_deref(), Some(&b"CA PEM"[..]));
        assert_eq!(c.auth, Auth::ClientCert { cert: b"CERT PEM".to_vec(), key: b"KEY PEM".to_vec() });
        assert!(!c.insecure);
    }

    #[test]
    fn data_fields_are_base64_and_tokens_and_token_files_authenticate_too() {
        let text = "current-context: c\nclusters:\n- name: k\n  cluster: {server: 'https://api:6443', certificate-authority-data: Q0EgUEVN}\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nusers:\n- name: u\n  user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}\n";
        let c = parse_text(text).unwrap();
        assert_eq!(c.ca.as_deref(), Some(&b"CA PEM"[..]));
        assert_eq!(c.auth, Auth::ClientCert { cert: b"CERT".to_vec(), key: b"KEY".to_vec() });
        let token = text.replace("{client-certificate-data: Q0VSVA==, client-key-data: S0VZ}", "{token: abc.def}");
        assert_eq!(parse_text(&token).unwrap().auth, Auth::Token("abc.def".into()));
        let file = text.replace("{client-certificate-data: Q0VSVA==, client-key-data: S0VZ}", "{tokenFile: token}");
        assert_eq!(parse_text(&file).unwrap().auth, Auth::TokenFile("/etc/ferrolet/token".into()));
    }

    #[test]
    fn every_problem_names_the_file_and_the_field() {
        let e = |from: &str, to: &str| parse_text(&NODE.replace(from, to)).unwrap_err();
        assert_eq!(
            e("client-key: /var/lib/ferrolet/node.key", "client-key: /nope"),
            "kubeconfig /etc/ferrolet/kubeconfig: users[0].user.client-key: cannot read /nope: No such file or directory (os error 2)"
        );
        assert_eq!(
            e("https://10.0.0.1:6443/", "http://10.0.0.1:8080"),
            "kubeconfig /etc/ferrolet/kubeconfig: clusters[0].cluster.server: \"http://10.0.0.1:8080\" must be an https:// URL"
        );
        assert_eq!(
            e("current-context: node", "current-context: other"),
            "kubeconfig /etc/ferrolet/kubeconfig: current-context: \"other\" is not one of the contexts"
        );
        assert_eq!(
            e("    client-key: /var/lib/ferrolet/node.key\n", "    exec: {command: aws}\n"),
            "kubeconfig /etc/ferrolet/kubeconfig: users[0].user.exec: is not supported: use a client certificate (as kubelet does), a token or a token file"
        );
        assert_eq!(
            e("    client-key: /var/lib/ferrolet/node.key\n", ""),
            "kubeconfig /etc/ferrolet/kubeconfig: users[0].user.client-key: is required with a client certificate"
        );
        assert!(
            e("clusters:", "clusters: 3\nx:").starts_with("kubeconfig /etc/ferrolet/kubeconfig: not a kubeconfig: ")
        );
        let ca_data = NODE.replace(
            "certificate-authority: pki/ca.crt",
            "certificate-authority: pki/ca.crt\n    certificate-authority-data: eA==",
        );
        assert_eq!(
            parse_text(&ca_data).unwrap_err(),
            "kubeconfig /etc/ferrolet/kubeconfig: clusters[0].cluster: sets both certificate-authority and certificate-authority-data"
        );
    }

    #[test]
    fn base64_is_decoded_with_or_without_padding_and_refused_when_not() {
        assert_eq!(base64_decode("aGVsbG8="), Some(b"hello".to_vec()));
        assert_eq!(base64_decode("aGVsbG8"), Some(b"hello".to_vec()));
        assert_eq!(base64_decode("aGVs\nbG8="), Some(b"hello".to_vec()));
        assert_eq!(base64_decode("a*b"), None);
    }

    #[test]
    fn a_deeply_nested_kubeconfig_is_refused_before_it_is_parsed() {
        let text = format!("apiVersion: v1\nclusters: {}", "[".repeat(50_000));
        let e = parse_text(&text).unwrap_err();
        assert!(e.contains("nested more than 1000 levels"), "{e}");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            #[test]
            fn any_text_is_a_connection_or_an_error_without_a_panic(text in "\\PC{0,300}") {
                let _ = parse_text(&text);
            }

            #[test]
            fn any_field_value_is_taken_or_refused_without_a_panic(
                field in prop::sample::select(vec![
                    "server", "certificate-authority", "certificate-authority-data", "client-key",
                    "client-certificate-data", "cluster", "user", "current-context",
                ]),
                value in "[a-zA-Z0-9:/.=+{}\\[\\], '-]{0,40}",
            ) {
                let text = NODE.replace(&format!("{field}: "), &format!("{field}: {value} #"));
                let _ = parse_text(&text);
            }

            #[test]
            fn the_server_is_taken_without_its_trailing_slash(host in "[a-z][a-z0-9-]{0,10}", port in 1u16..) {
                let text = NODE.replace("https://10.0.0.1:6443/", &format!("https://{host}:{port}/"));
                prop_assert_eq!(parse_text(&text).map(|c| c.server), Ok(format!("https://{host}:{port}")));
            }
        }
    }

    #[test]
    fn the_node_kubeconfig_bootstrap_writes_reads_back_with_the_pair_file() {
        let conn = Connection {
            server: "https://10.0.0.1:6443".into(),
            ca: Some(b"-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n".to_vec()),
            insecure: false,
            auth: Auth::Token("abcdef.0123456789abcdef".into()),
        };
        let text = node_text(&conn, Path::new("/var/lib/ferrolet/pki/kubelet-client-current.pem"));
        let read = |p: &Path| {
            assert_eq!(p, Path::new("/var/lib/ferrolet/pki/kubelet-client-current.pem"));
            Ok(b"PAIR".to_vec())
        };
        let back = parse(Path::new("/etc/ferrolet/kubelet.conf"), &text, &read).unwrap();
        assert_eq!(back.server, conn.server);
        assert_eq!(back.ca, conn.ca);
        assert!(!back.insecure);
        assert_eq!(back.auth, Auth::ClientCert { cert: b"PAIR".to_vec(), key: b"PAIR".to_vec() });
        let insecure = Connection { insecure: true, ca: None, ..conn };
        let back = parse(Path::new("/k"), &node_text(&insecure, Path::new("/p.pem")), &|_: &Path| Ok(vec![])).unwrap();
        assert!(back.insecure && back.ca.is_none());
    }
}
