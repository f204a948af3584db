//! `$(VAR)` expansion as Kubernetes does it for env values, command and args
//! (k8s.io/kubernetes third_party/forked/golang/expansion): `$(NAME)` is replaced when NAME
//! is known, left as written otherwise; `$$` is an escaped `$`.

/// Expands `$(VAR)` references in `input` using `lookup`.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let bytes = input.as_bytes();
    let mut i = 0;
    let mut last = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'$' => {
                    out.push_str(&input[last..i]);
                    out.push('$');
                    i += 2;
                    last = i;
                    continue;
                }
                b'(' => {
                    if let Some(end) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + end];
                        out.push_str(&input[last..i]);
                        match lookup(name) {
                            Some(v) => out.push_str(&v),
                            None => out.push_str(&input[i..i + 3 + end]),
                        }
                        i += 3 + end;
                        last = i;
                        continue;
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    out.push_str(&input[last..]);
    out
}

/// Resolves a container's env list in order: each value may refer to variables defined
/// before it (and to `base`, e.g. nothing for static pods). Returns (name, value) pairs.
pub fn resolve_env(env: &[crate::api::EnvVar], base: &[(String, String)]) -> Vec<(String, String)> {
    let mut resolved: Vec<(String, String)> = base.to_vec();
    for var in env {
        let value = {
            let lookup = |name: &str| resolved.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.clone());
            expand(&var.value, &lookup)
        };
        resolved.retain(|(n, _)| n != &var.name);
        resolved.push((var.name.clone(), value));
    }
    resolved
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::EnvVar;

    fn lookup(name: &str) -> Option<String> {
        match name {
            "A" => Some("alpha".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expands_known_variables_and_keeps_unknown_ones() {
        assert_eq!(expand("x-$(A)-y", &lookup), "x-alpha-y");
        assert_eq!(expand("$(NOPE)", &lookup), "$(NOPE)");
        assert_eq!(expand("$$(A)", &lookup), "$(A)");
        assert_eq!(expand("$(EMPTY)z", &lookup), "z");
        assert_eq!(expand("$(A", &lookup), "$(A");
        assert_eq!(expand("cost $5", &lookup), "cost $5");
    }

    #[test]
    fn env_values_see_earlier_variables_only() {
        let env = vec![
            EnvVar { name: "LATER_REF".into(), value: "$(B)".into(), value_from: None },
            EnvVar { name: "B".into(), value: "bee".into(), value_from: None },
            EnvVar { name: "C".into(), value: "$(B)-see".into(), value_from: None },
        ];
        let got = resolve_env(&env, &[]);
        assert_eq!(
            got,
            vec![
                ("LATER_REF".to_string(), "$(B)".to_string()),
                ("B".to_string(), "bee".to_string()),
                ("C".to_string(), "bee-see".to_string()),
            ]
        );
    }
}
