//! `--nodes` / `--exclude`: which of the config's nodes a command uses (a pure function).
//!
//! Both take a hostlist expression. The selected nodes keep the config's order, so node ranks
//! are recounted from 0 over what is left (a node's rank is its index in `Config::nodes`).

use super::check::node_list;
use super::error::help_line;
use super::hostlist::{self, HostlistError};
use super::suggest;
use super::types::{Config, Node};

/// Why `--nodes` / `--exclude` cannot be applied. `Display` is the whole message, with a
/// `= help:` line when a misspelt host is probably another one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error("{flag} {expr:?}: malformed hostlist: {error}")]
    Malformed { flag: &'static str, expr: String, error: HostlistError },
    #[error("{flag}: {host:?} is not one of the nodes ({nodes}){}", help(suggestion.as_deref()))]
    UnknownHost {
        flag: &'static str,
        host: String,
        /// The config's nodes, abbreviated.
        nodes: String,
        suggestion: Option<String>,
    },
    #[error("no node left to run on after {what}")]
    Empty { what: String },
    #[error(
        "{field} = {wanted} but {what} leaves {left} node(s): select at least {wanted}, or lower {field}"
    )]
    TooFew { field: &'static str, wanted: usize, left: usize, what: String },
    #[error(
        "rendezvous.master {master:?} is not among the selected nodes: select it too, \
         or remove rendezvous.master so that the first selected node is the master"
    )]
    MasterExcluded { master: String },
}

fn help(suggestion: Option<&str>) -> String {
    suggestion.map(|s| format!("\n{}", help_line(1, &suggest::help(s)))).unwrap_or_default()
}

/// Keeps only the nodes `nodes` lists (when given), then drops those `exclude` lists (when
/// given). Every host named must be one of the config's nodes, at least `job.nnodes` and
/// `restart.min_nodes` must be left (a selection never shrinks the job silently), and an
/// explicit `rendezvous.master` must be left.
pub fn select_nodes(
    config: &mut Config,
    nodes: Option<&str>,
    exclude: Option<&str>,
) -> Result<(), SelectionError> {
    if nodes.is_none() && exclude.is_none() {
        return Ok(());
    }
    let keep = nodes.map(|expr| hosts_of("--nodes", expr, &config.nodes)).transpose()?;
    let drop = exclude.map(|expr| hosts_of("--exclude", expr, &config.nodes)).transpose()?;
    config.nodes.retain(|n| {
        keep.as_ref().is_none_or(|k| k.contains(&n.host))
            && drop.as_ref().is_none_or(|d| !d.contains(&n.host))
    });
    let what = || match (nodes, exclude) {
        (Some(n), Some(e)) => format!("--nodes {n:?} --exclude {e:?}"),
        (Some(n), None) => format!("--nodes {n:?}"),
        (None, Some(e)) => format!("--exclude {e:?}"),
        (None, None) => unreachable!("returned early"),
    };
    let left = config.nodes.len();
    if left == 0 {
        return Err(SelectionError::Empty { what: what() });
    }
    let wanted = [("job.nnodes", config.job.nnodes), ("restart.min_nodes", config.restart.min_nodes)];
    if let Some((field, Some(wanted))) = wanted.into_iter().find(|(_, n)| n.is_some_and(|n| n > left)) {
        return Err(SelectionError::TooFew { field, wanted, left, what: what() });
    }
    if let Some(master) = &config.rendezvous.master {
        if !config.nodes.iter().any(|n| &n.host == master) {
            return Err(SelectionError::MasterExcluded { master: master.clone() });
        }
    }
    Ok(())
}

/// The hosts `expr` names, each checked to be one of `nodes`.
fn hosts_of(flag: &'static str, expr: &str, nodes: &[Node]) -> Result<Vec<String>, SelectionError> {
    let hosts = hostlist::expand(expr).map_err(|error| SelectionError::Malformed {
        flag,
        expr: expr.to_string(),
        error,
    })?;
    for host in &hosts {
        if !nodes.iter().any(|n| &n.host == host) {
            return Err(SelectionError::UnknownHost {
                flag,
                host: host.clone(),
                nodes: node_list(nodes),
                suggestion: suggest::did_you_mean(host, nodes.iter().map(|n| n.host.as_str()))
                    .map(str::to_string),
            });
        }
    }
    Ok(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(extra: &str) -> Config {
        let text = format!("[[nodes]]\nhost = \"gpu-[01-04]\"\n[[nodes]]\nhost = \"cpu9\"\n[job]\nscript = \"t.py\"\n{extra}");
        crate::config::parse(Path::new("c.toml"), &text).unwrap()
    }

    fn select(nodes: Option<&str>, exclude: Option<&str>) -> Result<Vec<String>, SelectionError> {
        let mut c = config("");
        select_nodes(&mut c, nodes, exclude)?;
        Ok(c.nodes.into_iter().map(|n| n.host).collect())
    }

    #[test]
    fn nothing_given_keeps_everything() {
        assert_eq!(select(None, None).unwrap(), ["gpu-01", "gpu-02", "gpu-03", "gpu-04", "cpu9"]);
    }

    #[test]
    fn nodes_keeps_the_config_order() {
        assert_eq!(select(Some("cpu9,gpu-[03,01]"), None).unwrap(), ["gpu-01", "gpu-03", "cpu9"]);
        assert_eq!(select(Some("gpu-02,gpu-02"), None).unwrap(), ["gpu-02"]);
    }

    #[test]
    fn exclude_drops() {
        assert_eq!(select(None, Some("gpu-[02-03]")).unwrap(), ["gpu-01", "gpu-04", "cpu9"]);
        assert_eq!(select(Some("gpu-[01-04]"), Some("gpu-01")).unwrap(), ["gpu-02", "gpu-03", "gpu-04"]);
    }

    #[test]
    fn malformed_expressions() {
        let err = select(Some("gpu-[3-1]"), None).unwrap_err();
        assert_eq!(err.to_string(), "--nodes \"gpu-[3-1]\": malformed hostlist: range 3-1 is descending");
        let err = select(None, Some("a,")).unwrap_err();
        assert_eq!(err.to_string(), "--exclude \"a,\": malformed hostlist: trailing ',' (empty host name)");
    }

    #[test]
    fn unknown_hosts_suggest_a_near_one() {
        let err = select(Some("gpu-01,gpu-4"), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--nodes: \"gpu-4\" is not one of the nodes (gpu-01, gpu-02, gpu-03, gpu-04, cpu9)\n   = help: did you mean \"gpu-04\"?"
        );
        let err = select(None, Some("cpu0")).unwrap_err();
        assert!(err.to_string().starts_with("--exclude: \"cpu0\" is not one of the nodes ("), "{err}");
        assert!(err.to_string().ends_with("= help: did you mean \"cpu9\"?"), "{err}");
        let err = select(None, Some("tpu-x")).unwrap_err();
        assert!(!err.to_string().contains("help"), "{err}");
    }

    #[test]
    fn an_empty_selection_is_an_error() {
        assert_eq!(
            select(None, Some("gpu-[01-04],cpu9")).unwrap_err().to_string(),
            "no node left to run on after --exclude \"gpu-[01-04],cpu9\""
        );
        assert_eq!(
            select(Some("gpu-01"), Some("gpu-01")).unwrap_err().to_string(),
            "no node left to run on after --nodes \"gpu-01\" --exclude \"gpu-01\""
        );
    }

    #[test]
    fn a_selection_never_runs_fewer_nodes_than_nnodes_or_min_nodes() {
        let mut c = config("nnodes = 3\n");
        let err = select_nodes(&mut c, None, Some("gpu-[03-04],cpu9")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "job.nnodes = 3 but --exclude \"gpu-[03-04],cpu9\" leaves 2 node(s): select at least 3, or lower job.nnodes"
        );
        let mut c = config("nnodes = 3\n");
        let err = select_nodes(&mut c, Some("gpu-[01-04]"), Some("gpu-01,gpu-02")).unwrap_err();
        assert_eq!(
            err,
            SelectionError::TooFew {
                field: "job.nnodes",
                wanted: 3,
                left: 2,
                what: "--nodes \"gpu-[01-04]\" --exclude \"gpu-01,gpu-02\"".into()
            }
        );
        // Exactly nnodes left: no spare, but the job keeps its size.
        let mut c = config("nnodes = 3\n");
        select_nodes(&mut c, Some("gpu-[01-03]"), None).unwrap();
        assert_eq!(c.nodes.len(), 3);
        // Without nnodes the job is every node selected, but not fewer than min_nodes.
        let mut c = config("[restart]\nmin_nodes = 4\n");
        let err = select_nodes(&mut c, Some("gpu-[01-03]"), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "restart.min_nodes = 4 but --nodes \"gpu-[01-03]\" leaves 3 node(s): select at least 4, or lower restart.min_nodes"
        );
        let mut c = config("");
        select_nodes(&mut c, Some("gpu-[01-02]"), None).unwrap();
        assert_eq!(c.nodes.len(), 2);
    }

    #[test]
    fn an_explicit_master_must_stay() {
        let mut c = config("[rendezvous]\nmaster = \"gpu-02\"\n");
        let err = select_nodes(&mut c, None, Some("gpu-02")).unwrap_err();
        assert_eq!(err, SelectionError::MasterExcluded { master: "gpu-02".into() });
        let mut c = config("[rendezvous]\nmaster = \"gpu-02\"\n");
        let err = select_nodes(&mut c, Some("gpu-01,cpu9"), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "rendezvous.master \"gpu-02\" is not among the selected nodes: select it too, or remove rendezvous.master so that the first selected node is the master"
        );
        let mut c = config("[rendezvous]\nmaster = \"gpu-02\"\n");
        select_nodes(&mut c, Some("gpu-[02-03]"), None).unwrap();
        assert_eq!(c.nodes.len(), 2);
    }

    #[test]
    fn without_an_explicit_master_the_first_selected_node_is_rank_0() {
        let mut c = config("");
        select_nodes(&mut c, None, Some("gpu-01")).unwrap();
        let plan =
            crate::plan::build(&c, &crate::plan::PlanInputs { cwd: "/w".into(), ..Default::default() });
        assert_eq!(plan.master.host, "gpu-02");
        assert_eq!(plan.master.node_rank, 0);
        let ranks: Vec<(usize, &str)> = plan.nodes.iter().map(|n| (n.node_rank, n.host.as_str())).collect();
        assert_eq!(ranks, [(0, "gpu-02"), (1, "gpu-03"), (2, "gpu-04"), (3, "cpu9")]);
    }
}
