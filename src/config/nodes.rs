//! `[[nodes]]` and `nodes_from`: which hosts, from the file, a hostfile or the Slurm allocation.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::Path;

use toml::Spanned;

use super::check::*;
use super::error::ConfigError;
use super::raw::*;
use super::types::*;
use super::{hostfile, hostlist, suggest};

impl Cx<'_> {
    /// The nodes, from `[[nodes]]` or `nodes_from`.
    pub(super) fn node_source(
        &self,
        nodes: Option<Spanned<Vec<RawNode>>>,
        nodes_from: Option<Spanned<String>>,
    ) -> Result<Vec<Node>> {
        match (nodes, nodes_from) {
            (Some(_), Some(from)) => {
                Err(self.err(from.span(), "both `nodes_from` and [[nodes]] list the nodes: keep one of them"))
            }
            (None, None) => Err(ConfigError::whole_file(
                self.path,
                "no nodes: add at least one [[nodes]] table with a `host`, or \
                 nodes_from = \"hostfile:PATH\" or \"slurm\" before the first table",
            )),
            (Some(nodes), None) => self.nodes(nodes),
            (None, Some(from)) => self.nodes_from(&from),
        }
    }

    pub(super) fn nodes_from(&self, from: &Spanned<String>) -> Result<Vec<Node>> {
        let value = from.get_ref();
        if value == "slurm" {
            return self.slurm_nodes("nodes_from = \"slurm\"", Some(from.span()));
        }
        if let Some(file) = value.strip_prefix("hostfile:").or((value == "hostfile").then_some("")) {
            if file.is_empty() {
                return Err(
                    self.err(from.span(), format!("nodes_from = {value:?} needs a path: \"hostfile:PATH\""))
                );
            }
            return self.hostfile_nodes(file, from.span());
        }
        let help = match value.split_once(':') {
            Some((kind, rest)) => {
                suggest::did_you_mean(kind, ["hostfile"]).map(|k| suggest::help(&format!("{k}:{rest}")))
            }
            None => suggest::help_for(value, ["slurm", "hostfile"]).map(|h| {
                if h.contains("hostfile") {
                    suggest::help(&format!("hostfile:{value}"))
                } else {
                    h
                }
            }),
        };
        Err(self
            .err(
                from.span(),
                format!("unknown nodes_from {value:?}: expected \"hostfile:PATH\" or \"slurm\""),
            )
            .with_help(help))
    }

    /// The hosts of a hostfile, `file` relative to the config file's directory.
    pub(super) fn hostfile_nodes(&self, file: &str, span: Range<usize>) -> Result<Vec<Node>> {
        let path = self.path.parent().unwrap_or(Path::new("")).join(file);
        let text = (self.options.read_file)(&path)
            .map_err(|e| self.err(span, format!("cannot read hostfile {}: {e}", path.display())))?;
        // A hostfile may be any file: its lines are never shown, only the offending token.
        let entries = hostfile::parse(&text).map_err(|e| match e.span {
            Some(span) => ConfigError::at(&path, &text, span, e.message).without_excerpt(),
            None => ConfigError::whole_file(&path, e.message),
        })?;
        Ok(entries
            .into_iter()
            .map(|e| Node {
                host: e.host,
                addr: None,
                nproc: e.slots,
                user: None,
                port: None,
                env: BTreeMap::new(),
            })
            .collect())
    }

    /// The hosts of the Slurm allocation, in Slurm's order. `what` asked for them, written at
    /// `span` (`None` for `--slurm`).
    pub(super) fn slurm_nodes(&self, what: &str, span: Option<Range<usize>>) -> Result<Vec<Node>> {
        let here = |message: String| match &span {
            Some(span) => self.err(span.clone(), message),
            None => ConfigError::whole_file(self.path, message),
        };
        let found = SLURM_NODELIST_VARS
            .iter()
            .find_map(|&var| (self.options.env)(var).filter(|v| !v.is_empty()).map(|v| (var, v)));
        let Some((var, list)) = found else {
            return Err(here(format!(
                "{what}: {OUTSIDE_ALLOCATION} ({} are unset); run under salloc or sbatch, \
                 or list the nodes in [[nodes]]",
                SLURM_NODELIST_VARS.join(" and ")
            )));
        };
        let hosts =
            hostlist::expand(&list).map_err(|e| here(format!("{what}: malformed {var} {list:?}: {e}")))?;
        let mut seen = std::collections::HashSet::new();
        let mut nodes = Vec::with_capacity(hosts.len());
        for host in hosts {
            if let Err(why) = check_host(&host) {
                return Err(here(format!("{what}: invalid host {host:?} in {var}: {why}")));
            }
            if !seen.insert(host.clone()) {
                return Err(here(format!("{what}: {var} lists {host:?} twice")));
            }
            nodes.push(Node { host, addr: None, nproc: None, user: None, port: None, env: BTreeMap::new() });
        }
        Ok(nodes)
    }

    /// The hosts of one `[[nodes]]` entry's `host` (a hostlist), each checked, after
    /// `listed` hosts of the entries before it.
    fn node_hosts(&self, raw: &Spanned<String>, listed: usize) -> Result<Vec<String>> {
        let (expr, span) = (raw.get_ref(), raw.span());
        let hosts = hostlist::expand(expr)
            .map_err(|e| self.err(span.clone(), format!("malformed hostlist {expr:?}: {e}")))?;
        if listed + hosts.len() > MAX_NODES {
            return Err(self
                .err(span, format!("too many nodes: with {expr:?} the config lists more than {MAX_NODES}")));
        }
        for host in &hosts {
            if let Err(why) = check_host(host) {
                let msg = if host == expr {
                    format!("invalid host {host:?}: {why}")
                } else {
                    format!("invalid host {host:?} (from hostlist {expr:?}): {why}")
                };
                return Err(self.err(span, msg));
            }
        }
        Ok(hosts)
    }

    /// A node's `addr`: only for an entry of one host.
    fn node_addr(&self, addr: Spanned<String>, hosts: &[String], expr: &str) -> Result<String> {
        if hosts.len() != 1 {
            return Err(self.err(
                addr.span(),
                format!(
                    "`addr` is only allowed on a node whose `host` is a single host, \
                     but {expr:?} expands to {} hosts",
                    hosts.len()
                ),
            ));
        }
        if let Err(why) = check_host(addr.get_ref()) {
            return Err(self.err(addr.span(), format!("invalid addr {:?}: {why}", addr.get_ref())));
        }
        Ok(addr.into_inner())
    }

    pub(super) fn nodes(&self, raw: Spanned<Vec<RawNode>>) -> Result<Vec<Node>> {
        const HINT: &str = "add at least one [[nodes]] table with a `host`";
        if raw.get_ref().is_empty() {
            return Err(self.err(raw.span(), format!("`nodes` is empty: {HINT}")));
        }
        let mut nodes = Vec::new();
        // host -> index of the [[nodes]] entry that listed it first
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, node) in raw.into_inner().into_iter().enumerate() {
            let (expr, span) = (node.host.get_ref(), node.host.span());
            let hosts = self.node_hosts(&node.host, nodes.len())?;
            let addr = node.addr.map(|addr| self.node_addr(addr, &hosts, expr)).transpose()?;
            let nproc = node.nproc.map(|n| self.count(&n, &format!("nodes[{i}].nproc"))).transpose()?;
            let user = node.user.map(|u| self.user(u, &format!("nodes[{i}].user"))).transpose()?;
            let port = node.port.map(|p| self.port(&p, &format!("nodes[{i}].port"))).transpose()?;
            let env = self.env_table(node.env, &format!("nodes[{i}].env"))?;
            for host in hosts {
                if let Some(&first) = seen.get(&host) {
                    let msg = if first == i {
                        format!("duplicate host {host:?}: nodes[{i}] lists it twice")
                    } else {
                        format!("duplicate host {host:?}: listed in nodes[{first}] and nodes[{i}]")
                    };
                    return Err(self.err(span, msg));
                }
                seen.insert(host.clone(), i);
                nodes.push(Node {
                    host,
                    addr: addr.clone(),
                    nproc,
                    user: user.clone(),
                    port,
                    env: env.clone(),
                });
            }
        }
        Ok(nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn nodes_are_in_file_then_expansion_order() {
        let text =
            format!("[[nodes]]\nhost = \"z[2,1]\"\n[[nodes]]\nhost = \"a-[01-02],10.0.0.[7-8]\"\n{JOB}");
        let hosts: Vec<String> = parse_ok(&text).nodes.into_iter().map(|n| n.host).collect();
        assert_eq!(hosts, ["z2", "z1", "a-01", "a-02", "10.0.0.7", "10.0.0.8"]);
        // Inline array form works too.
        let text = format!("nodes = [{{ host = \"a\" }}, {{ host = \"b\", nproc = 2 }}]\n{JOB}");
        let nodes = parse_ok(&text).nodes;
        assert_eq!(nodes[1].nproc, Some(2));
    }

    #[test]
    fn node_env_as_subtable_and_dotted_keys() {
        let text = format!(
            "[[nodes]]\nhost = \"a\"\nenv.A = \"1\"\n[[nodes]]\nhost = \"b\"\n[nodes.env]\nB = \"2\"\n{JOB}"
        );
        let nodes = parse_ok(&text).nodes;
        assert_eq!(nodes[0].env, [("A".to_string(), "1".to_string())].into());
        assert_eq!(nodes[1].env, [("B".to_string(), "2".to_string())].into());
    }

    #[test]
    fn nodes_from_a_hostfile_relative_to_the_config() {
        let text = format!("nodes_from = \"hostfile:hosts.txt\"\n{JOB}");
        let hostfile = "# rack 1\ngpu-02 slots=8\ngpu-01\n\ngpu-03 slots=2 # small\n";
        let config = parse_from(&text, &[], &[("/etc/herd/hosts.txt", hostfile)], false).unwrap();
        assert_eq!(hosts_and_nprocs(&config), [("gpu-02", Some(8)), ("gpu-01", None), ("gpu-03", Some(2))]);
        // An absolute path is used as it is.
        let text = format!("nodes_from = \"hostfile:/srv/h\"\n{JOB}");
        let config = parse_from(&text, &[], &[("/srv/h", "a slots=1\n")], false).unwrap();
        assert_eq!(hosts_and_nprocs(&config), [("a", Some(1))]);
    }

    #[test]
    fn hostfile_errors_name_the_hostfile_and_line() {
        let text = format!("nodes_from = \"hostfile:hosts.txt\"\n{JOB}");
        let err = |hostfile: &str| {
            parse_from(&text, &[], &[("/etc/herd/hosts.txt", hostfile)], false).unwrap_err().to_string()
        };
        // A hostfile may be any file: no line of it is shown, only the offending token.
        assert_eq!(
            err("a\nb\nc slots=x\n"),
            "/etc/herd/hosts.txt:3:3: slots must be a positive integer, found \"x\""
        );
        let shadow = err("root:$6$0123456789abcdefghijklmnopqrstuvwxyzSECRETHASH:19000:0:99999:7:::\n");
        assert!(!shadow.contains("SECRETHASH") && !shadow.contains("19000"), "{shadow}");
        assert!(err("a\nb\na\n")
            .starts_with("/etc/herd/hosts.txt:3:1: duplicate host \"a\": already listed on line 1"));
        assert!(err("a;b\n").starts_with("/etc/herd/hosts.txt:1:1: invalid host \"a;b\""));
        assert_eq!(
            err("# nothing\n"),
            "/etc/herd/hosts.txt: the hostfile lists no hosts (expected lines like `gpu-01 slots=8`)"
        );
        let missing = parse_from(&text, &[], &[], false).unwrap_err();
        assert_eq!(missing.line_col(), Some((1, 14)));
        assert!(missing.message().starts_with("cannot read hostfile /etc/herd/hosts.txt: "), "{missing}");
    }

    #[test]
    fn nodes_from_slurm_keeps_slurms_order() {
        let text = format!("nodes_from = \"slurm\"\n{JOB}nproc_per_node = 4\n");
        let config = parse_from(&text, &[("SLURM_JOB_NODELIST", "gpu-[07,01-02],cpu9")], &[], false).unwrap();
        assert_eq!(
            hosts_and_nprocs(&config),
            [("gpu-07", None), ("gpu-01", None), ("gpu-02", None), ("cpu9", None)]
        );
        assert_eq!(config.job.nproc_per_node, 4);
        let config = parse_from(&text, &[("SLURM_NODELIST", "r[1-2]n[01-02]")], &[], false).unwrap();
        let hosts: Vec<&str> = config.nodes.iter().map(|n| n.host.as_str()).collect();
        assert_eq!(hosts, ["r1n01", "r1n02", "r2n01", "r2n02"]);
        // SLURM_JOB_NODELIST wins over the older SLURM_NODELIST.
        let env = [("SLURM_JOB_NODELIST", "a"), ("SLURM_NODELIST", "b")];
        assert_eq!(parse_from(&text, &env, &[], false).unwrap().nodes[0].host, "a");
    }

    #[test]
    fn slurm_errors() {
        let text = format!("nodes_from = \"slurm\"\n{JOB}");
        let err = parse_from(&text, &[], &[], false).unwrap_err();
        assert_eq!(err.line_col(), Some((1, 14)));
        assert_eq!(
            err.message(),
            "nodes_from = \"slurm\": not inside a Slurm allocation (SLURM_JOB_NODELIST and SLURM_NODELIST are unset); run under salloc or sbatch, or list the nodes in [[nodes]]"
        );
        let err = parse_from(&text, &[("SLURM_JOB_NODELIST", "n[3-1]")], &[], false).unwrap_err();
        assert_eq!(
            err.message(),
            "nodes_from = \"slurm\": malformed SLURM_JOB_NODELIST \"n[3-1]\": range 3-1 is descending"
        );
        let err = parse_from(&text, &[("SLURM_JOB_NODELIST", "a,-x")], &[], false).unwrap_err();
        assert!(err.message().contains("invalid host \"-x\" in SLURM_JOB_NODELIST"), "{err}");
        // --slurm: not in the file, so not at a line.
        let err = parse_from(&format!("[[nodes]]\nhost = \"a\"\n{JOB}"), &[], &[], true).unwrap_err();
        assert_eq!(err.line_col(), None);
        assert!(
            err.to_string().starts_with("/etc/herd/cluster.toml: --slurm: not inside a Slurm allocation"),
            "{err}"
        );
    }

    #[test]
    fn the_slurm_flag_overrides_the_files_nodes() {
        let env = [("SLURM_JOB_NODELIST", "s[1-2]"), ("SLURM_JOB_ID", "7")];
        for nodes in ["[[nodes]]\nhost = \"a\"\n", "nodes_from = \"hostfile:none\"\n"] {
            let config = parse_from(&format!("{nodes}{JOB}"), &env, &[], true).unwrap();
            assert_eq!(hosts_and_nprocs(&config), [("s1", None), ("s2", None)]);
        }
        // The master must still be one of the nodes.
        let text = format!("[[nodes]]\nhost = \"a\"\n{JOB}[rendezvous]\nmaster = \"a\"\n");
        let err = parse_from(&text, &env, &[], true).unwrap_err();
        assert_eq!(err.message(), "rendezvous.master \"a\" is not one of the nodes (s1, s2)");
    }

    #[test]
    fn nodes_from_must_be_alone_and_known() {
        let text = format!("nodes_from = \"slurm\"\n[[nodes]]\nhost = \"a\"\n{JOB}");
        let err = parse_from(&text, &[("SLURM_JOB_NODELIST", "a")], &[], false).unwrap_err();
        assert_eq!(err.line_col(), Some((1, 14)));
        assert_eq!(err.message(), "both `nodes_from` and [[nodes]] list the nodes: keep one of them");
        let cases =
            [("slurn", Some("slurm")), ("hostfil:h.txt", Some("hostfile:h.txt")), ("hosts.txt", None)];
        for (value, help) in cases {
            let err = parse_from(&format!("nodes_from = {value:?}\n{JOB}"), &[], &[], false).unwrap_err();
            assert_eq!(
                err.message(),
                format!("unknown nodes_from {value:?}: expected \"hostfile:PATH\" or \"slurm\""),
            );
            assert_eq!(err.help(), help.map(suggest::help).as_deref(), "{value}");
        }
        let err = parse_from(&format!("nodes_from = \"hostfile:\"\n{JOB}"), &[], &[], false).unwrap_err();
        assert_eq!(err.message(), "nodes_from = \"hostfile:\" needs a path: \"hostfile:PATH\"");
        let err = parse_from(&format!("nodes_from = \"hostfile\"\n{JOB}"), &[], &[], false).unwrap_err();
        assert_eq!(err.message(), "nodes_from = \"hostfile\" needs a path: \"hostfile:PATH\"");
    }

    #[test]
    fn nodes_missing_or_empty() {
        assert_file_err(
            JOB,
            "no nodes: add at least one [[nodes]] table with a `host`, or nodes_from = \"hostfile:PATH\" or \"slurm\" before the first table",
        );
        assert_err(
            &format!("nodes = []\n{JOB}"),
            1,
            9,
            "`nodes` is empty: add at least one [[nodes]] table with a `host`",
        );
    }

    #[test]
    fn malformed_hostlists() {
        let cases = [
            ("n[3-1]", "range 3-1 is descending"),
            ("n[1-", "unclosed '[' (missing ']')"),
            ("n[x]", "expected a number, found \"x\""),
            ("n[]", "empty brackets '[]'"),
            ("n]", "unmatched ']'"),
            ("n[1[2]]", "nested '[' is not allowed"),
            ("", "empty hostlist expression"),
            ("a,,b", "empty host name (two ',' in a row or a leading ',')"),
        ];
        for (expr, why) in cases {
            assert_err(
                &format!("[[nodes]]\nhost = \"a\"\n\n[[nodes]]\nhost = \"{expr}\"\n{JOB}"),
                5,
                8,
                &format!("malformed hostlist {expr:?}: {why}"),
            );
        }
    }

    #[test]
    fn invalid_host_characters() {
        let cases = [
            ("a b", "invalid host \"a b\": ' ' is not allowed (only letters, digits and . _ : % - are)"),
            ("a;rm", "invalid host \"a;rm\": ';' is not allowed (only letters, digits and . _ : % - are)"),
            ("$(x)", "invalid host \"$(x)\": '$' is not allowed (only letters, digits and . _ : % - are)"),
            ("-oProxyCommand=x", "invalid host \"-oProxyCommand=x\": a host may not start with '-'"),
            ("user@h", "invalid host \"user@h\": '@' is not allowed (only letters, digits and . _ : % - are)"),
            ("-n[1-2]", "invalid host \"-n1\" (from hostlist \"-n[1-2]\"): a host may not start with '-'"),
            ("ok,b d", "invalid host \"b d\" (from hostlist \"ok,b d\"): ' ' is not allowed (only letters, digits and . _ : % - are)"),
        ];
        for (expr, message) in cases {
            assert_err(&format!("[[nodes]]\nhost = \"{expr}\"\n{JOB}"), 2, 8, message);
        }
        // IPv6 literals and zone ids are fine.
        let text = format!("[[nodes]]\nhost = \"fe80::1%eth0\"\n{JOB}");
        assert_eq!(parse_ok(&text).nodes[0].host, "fe80::1%eth0");
    }

    #[test]
    fn duplicate_hosts() {
        assert_err(
            &format!("[[nodes]]\nhost = \"gpu-[01-03]\"\n[[nodes]]\nhost = \"cpu\"\n[[nodes]]\nhost = \"gpu-02\"\n{JOB}"),
            6,
            8,
            "duplicate host \"gpu-02\": listed in nodes[0] and nodes[2]",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a,n[1-2],n1\"\n{JOB}"),
            2,
            8,
            "duplicate host \"n1\": nodes[0] lists it twice",
        );
    }

    #[test]
    fn addr_rules() {
        assert_err(
            &format!("[[nodes]]\nhost = \"gpu-[01-04]\"\naddr = \"10.0.0.1\"\n{JOB}"),
            3,
            8,
            "`addr` is only allowed on a node whose `host` is a single host, but \"gpu-[01-04]\" expands to 4 hosts",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\naddr = \"10.0.0.1 -oX\"\n{JOB}"),
            3,
            8,
            "invalid addr \"10.0.0.1 -oX\": ' ' is not allowed (only letters, digits and . _ : % - are)",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\naddr = \"-x\"\n{JOB}"),
            3,
            8,
            "invalid addr \"-x\": a host may not start with '-'",
        );
    }
}
