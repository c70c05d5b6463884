//! `[env]` and `nodes[i].env`: the variables every node (or one) gets.

use std::collections::BTreeMap;

use super::check::*;
use super::raw::*;

impl Cx<'_> {
    /// `[env]` or `nodes[i].env`; `section` names it in messages.
    pub(super) fn env_table(&self, raw: Option<EnvTable>, section: &str) -> Result<BTreeMap<String, String>> {
        let mut env = BTreeMap::new();
        for (name, value) in raw.unwrap_or_default().0 {
            let key = name.get_ref();
            if !is_env_name(key) {
                return Err(self.err(
                    name.span(),
                    format!(
                        "invalid environment variable name {key:?} in {section}: names must be \
                         letters, digits and _, not starting with a digit"
                    ),
                ));
            }
            if RESERVED_ENV.contains(&key.as_str()) {
                return Err(self.err(
                    name.span(),
                    format!("{key} is set by herd for every node; remove it from {section}"),
                ));
            }
            let text = match value.get_ref() {
                toml::Value::String(s) => s.clone(),
                other => {
                    let found = with_article(other.type_str());
                    let hint = match other {
                        toml::Value::Array(_) | toml::Value::Table(_) => String::new(),
                        scalar => format!("; quote it: {key} = \"{scalar}\""),
                    };
                    return Err(self.err(
                        value.span(),
                        format!("{key} in {section} must be a string, found {found}{hint}"),
                    ));
                }
            };
            if text.contains('\0') {
                return Err(self.err(value.span(), format!("{key} in {section} contains a NUL character")));
            }
            env.insert(name.into_inner(), text);
        }
        Ok(env)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn env_names_and_values() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}");
        assert_err(
            &format!("{base}[env]\n\"1BAD\" = \"x\"\n"),
            6,
            1,
            "invalid environment variable name \"1BAD\" in [env]: names must be letters, digits and _, not starting with a digit",
        );
        assert_err(
            &format!("{base}[env]\n\"A-B\" = \"x\"\n"),
            6,
            1,
            "invalid environment variable name \"A-B\" in [env]: names must be letters, digits and _, not starting with a digit",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\nenv = {{ \"X Y\" = \"1\" }}\n{JOB}"),
            3,
            9,
            "invalid environment variable name \"X Y\" in nodes[0].env: names must be letters, digits and _, not starting with a digit",
        );
        assert_err(
            &format!("{base}[env]\nNCCL_DEBUG = 1\n"),
            6,
            14,
            "NCCL_DEBUG in [env] must be a string, found an integer; quote it: NCCL_DEBUG = \"1\"",
        );
        assert_err(
            &format!("{base}[env]\nFLAG = true\n"),
            6,
            8,
            "FLAG in [env] must be a string, found a boolean; quote it: FLAG = \"true\"",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\nenv = {{ L = [1] }}\n{JOB}"),
            3,
            13,
            "L in nodes[0].env must be a string, found an array",
        );
    }

    #[test]
    fn reserved_env_names() {
        for name in RESERVED_ENV {
            assert_err(
                &format!("[[nodes]]\nhost = \"a\"\n{JOB}[env]\n{name} = \"x\"\n"),
                6,
                1,
                &format!("{name} is set by herd for every node; remove it from [env]"),
            );
        }
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\n[[nodes]]\nhost = \"b\"\nenv = {{ RANK = \"0\" }}\n{JOB}"),
            5,
            9,
            "RANK is set by herd for every node; remove it from nodes[1].env",
        );
    }
}
