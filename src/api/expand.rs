//! `$(VAR)` expansion as Kubernetes does it for env values, command and args
//! (k8s.io/kubernetes third_party/forked/golang/expansion): `$(NAME)` is replaced when NAME
//! is known, left as written otherwise; `$$` is an escaped `$`.

/// One piece of an input: literal text, or a `$(NAME)` reference (`$$` is the literal `$`).
enum Piece<'a> {
    /// Copied as it is.
    Text(&'a str),
    /// `$(NAME)`: the variable's value when it is defined, else the reference as written.
    Var(&'a str),
}

/// Splits `input` into pieces, as `expansion.Expand` reads it; the references are never
/// expanded again (a value containing `$(X)` stays as it is).
fn for_each_piece<'a>(input: &'a str, mut f: impl FnMut(Piece<'a>)) {
    let bytes = input.as_bytes();
    let mut i = 0;
    let mut last = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'$' => {
                    f(Piece::Text(&input[last..i]));
                    f(Piece::Text("$"));
                    i += 2;
                    last = i;
                    continue;
                }
                b'(' => {
                    if let Some(end) = input[i + 2..].find(')') {
                        f(Piece::Text(&input[last..i]));
                        f(Piece::Var(&input[i + 2..i + 2 + end]));
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
    f(Piece::Text(&input[last..]));
}

/// Expands `$(VAR)` references in `input` using `lookup`.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    for_each_piece(input, |p| match p {
        Piece::Text(t) => out.push_str(t),
        Piece::Var(name) => match lookup(name) {
            Some(v) => out.push_str(&v),
            None => {
                out.push_str("$(");
                out.push_str(name);
                out.push(')');
            }
        },
    });
    out
}

/// The length `expand` would return, computed from the variables' lengths alone: no
/// string is built, so a manifest that would expand to gigabytes costs nothing to check.
pub fn expanded_len(input: &str, len_of: &dyn Fn(&str) -> Option<usize>) -> usize {
    let mut n = 0usize;
    for_each_piece(input, |p| {
        let add = match p {
            Piece::Text(t) => t.len(),
            Piece::Var(name) => len_of(name).unwrap_or(name.len() + 3),
        };
        n = n.saturating_add(add);
    });
    n
}

/// Lengths after expansion of a container's env values (in order, each seeing the
/// variables defined before it, as `resolve_env` does) and of its command and args
/// (seeing every variable).
pub fn expanded_lengths(env: &[crate::api::EnvVar], argv: &[&String]) -> (Vec<usize>, Vec<usize>) {
    let mut known: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut env_lens = Vec::with_capacity(env.len());
    for var in env {
        let n = expanded_len(&var.value, &|name| known.get(name).copied());
        known.insert(&var.name, n);
        env_lens.push(n);
    }
    let argv_lens = argv.iter().map(|a| expanded_len(a, &|name| known.get(name).copied())).collect();
    (env_lens, argv_lens)
}

/// Resolves a container's env list in order: each value may refer to variables defined
/// before it (and to `base`: the variables of its `envFrom` sources). A `valueFrom` source's
/// value is `from`'s (`None`: the variable is left unset, as for a missing optional key).
/// Returns (name, value) pairs.
pub fn resolve_env(
    env: &[crate::api::EnvVar],
    base: &[(String, String)],
    mut from: impl FnMut(&serde_json::Value) -> Option<String>,
) -> Vec<(String, String)> {
    let mut resolved: Vec<(String, String)> = base.to_vec();
    for var in env {
        let value = match &var.value_from {
            // A source's value is taken as it is, never expanded (as kubelet).
            Some(source) => match from(source) {
                Some(v) => v,
                None => continue,
            },
            None => {
                let lookup = |name: &str| resolved.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.clone());
                expand(&var.value, &lookup)
            }
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
        assert_eq!(expand("$(A$(A)", &lookup), "$(A$(A)");
    }

    #[test]
    fn expanded_len_matches_expand_without_building_the_string() {
        let len_of = |name: &str| lookup(name).map(|v| v.len());
        for input in ["x-$(A)-y", "$(NOPE)", "$$(A)", "$(EMPTY)z", "$(A", "cost $5", "$(A)$(A)$$$", ""] {
            assert_eq!(expanded_len(input, &len_of), expand(input, &lookup).len(), "{input}");
        }
    }

    #[test]
    fn references_multiply_but_results_are_not_expanded_again() {
        // Kubernetes semantics: B holds A's value 1000 times; C = $(B) x 1000 is 10^6 x A.
        let env = vec![
            EnvVar { name: "A".into(), value: "x".repeat(1000), value_from: None },
            EnvVar { name: "B".into(), value: "$(A)".repeat(1000), value_from: None },
            EnvVar { name: "C".into(), value: "$(B)".repeat(1000), value_from: None },
            EnvVar { name: "D".into(), value: "$$(C)".into(), value_from: None },
        ];
        let (lens, argv) = expanded_lengths(&env, &[&"$(D)".to_string()]);
        assert_eq!(lens, vec![1000, 1_000_000, 1_000_000_000, 4]);
        assert_eq!(argv, vec![4], "$(D) is \"$(C)\", not C's value: results are not expanded again");
    }

    #[test]
    fn env_values_see_earlier_variables_only() {
        let env = vec![
            EnvVar { name: "LATER_REF".into(), value: "$(B)".into(), value_from: None },
            EnvVar { name: "B".into(), value: "bee".into(), value_from: None },
            EnvVar { name: "C".into(), value: "$(B)-see".into(), value_from: None },
        ];
        let got = resolve_env(&env, &[], |_| Some(String::new()));
        assert_eq!(
            got,
            vec![
                ("LATER_REF".to_string(), "$(B)".to_string()),
                ("B".to_string(), "bee".to_string()),
                ("C".to_string(), "bee-see".to_string()),
            ]
        );
    }

    #[test]
    fn env_from_comes_first_env_wins_and_a_missing_optional_source_sets_nothing() {
        let from = |v: &serde_json::Value| v.get("secretKeyRef").map(|_| "s3cret".to_string());
        let env = vec![
            EnvVar { name: "MODE".into(), value: "$(MODE)-override".into(), value_from: None },
            EnvVar {
                name: "PW".into(),
                value: String::new(),
                value_from: Some(serde_json::json!({"secretKeyRef": {}})),
            },
            EnvVar {
                name: "GONE".into(),
                value: String::new(),
                value_from: Some(serde_json::json!({"configMapKeyRef": {}})),
            },
            EnvVar { name: "URL".into(), value: "db://$(PW)@$(HOST)".into(), value_from: None },
        ];
        let base = vec![("HOST".to_string(), "db.local".to_string()), ("MODE".to_string(), "prod".to_string())];
        let got = resolve_env(&env, &base, from);
        assert_eq!(
            got,
            vec![
                ("HOST".to_string(), "db.local".to_string()),
                ("MODE".to_string(), "prod-override".to_string()),
                ("PW".to_string(), "s3cret".to_string()),
                ("URL".to_string(), "db://s3cret@db.local".to_string()),
            ],
            "envFrom's variables first, then env in order, each seeing what came before"
        );
    }
}
