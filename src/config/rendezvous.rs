//! `[rendezvous]`: the master node, its port, and the interface the ranks use.

use super::check::*;
use super::raw::*;
use super::suggest;
use super::types::*;
use toml::Spanned;

impl Cx<'_> {
    /// `[rendezvous]`, for `nodes` of which the first `nnodes` are active (the rest spares).
    pub(super) fn rendezvous(
        &self,
        raw: Option<RawRendezvous>,
        nodes: &[Node],
        nnodes: usize,
    ) -> Result<Rendezvous> {
        let Some(raw) = raw else {
            return Ok(Rendezvous::default());
        };
        Ok(Rendezvous {
            master: self.master(raw.master, nodes, nnodes)?,
            port: self.rendezvous_port(raw.port.as_ref())?,
            port_range: self.port_range(raw.port_range.as_ref())?,
            interface: self.interface(raw.interface)?,
        })
    }

    /// `rendezvous.master`: one of the active nodes.
    fn master(&self, raw: Option<Spanned<String>>, nodes: &[Node], nnodes: usize) -> Result<Option<String>> {
        Ok(match raw {
            None => None,
            Some(m) => {
                if !nodes.iter().any(|n| n.host == *m.get_ref()) {
                    return Err(self
                        .err(
                            m.span(),
                            format!(
                                "rendezvous.master {:?} is not one of the nodes ({})",
                                m.get_ref(),
                                node_list(nodes)
                            ),
                        )
                        .with_help(suggest::help_for(m.get_ref(), nodes.iter().map(|n| n.host.as_str()))));
                }
                if nodes.iter().position(|n| n.host == *m.get_ref()).is_some_and(|i| i >= nnodes) {
                    return Err(self.err(
                    m.span(),
                    format!(
                        "rendezvous.master {:?} is a spare (job.nnodes = {nnodes} makes the nodes after the first {nnodes} spares): name one of the first {nnodes}, or leave it out for node rank 0",
                        m.get_ref()
                    ),
                ));
                }
                Some(m.into_inner())
            }
        })
    }

    /// `rendezvous.port`: `"auto"` or a port number.
    fn rendezvous_port(&self, raw: Option<&Spanned<toml::Value>>) -> Result<PortSpec> {
        Ok(match raw {
            None => PortSpec::Auto,
            Some(p) => match p.get_ref() {
                toml::Value::String(s) if s == "auto" => PortSpec::Auto,
                toml::Value::Integer(n) => {
                    PortSpec::Fixed(self.port_number(*n, p.span(), "rendezvous.port")?)
                }
                toml::Value::String(s) => {
                    return Err(self.err(
                        p.span(),
                        format!("rendezvous.port must be \"auto\" or a port number 1-65535, found {s:?}"),
                    ))
                }
                other => {
                    return Err(self.err(
                        p.span(),
                        format!(
                            "rendezvous.port must be \"auto\" or a port number 1-65535, found {}",
                            with_article(other.type_str())
                        ),
                    ))
                }
            },
        })
    }

    /// `rendezvous.port_range`: `[lo, hi]`, not empty.
    fn port_range(&self, raw: Option<&Spanned<Vec<Spanned<i64>>>>) -> Result<(u16, u16)> {
        Ok(match raw {
            None => DEFAULT_PORT_RANGE,
            Some(range) => {
                let [lo, hi] = range.get_ref().as_slice() else {
                    return Err(self.err(
                        range.span(),
                        format!(
                            "rendezvous.port_range must be two ports [lo, hi], found {} values",
                            range.get_ref().len()
                        ),
                    ));
                };
                let lo_port = self.port_number(*lo.get_ref(), lo.span(), "rendezvous.port_range")?;
                let hi_port = self.port_number(*hi.get_ref(), hi.span(), "rendezvous.port_range")?;
                if lo_port > hi_port {
                    return Err(self.err(
                        range.span(),
                        format!(
                            "rendezvous.port_range [{lo_port}, {hi_port}] is empty: \
                         the first port must not be greater than the second"
                        ),
                    ));
                }
                (lo_port, hi_port)
            }
        })
    }

    /// `rendezvous.interface`: a network interface's name.
    fn interface(&self, raw: Option<Spanned<String>>) -> Result<Option<String>> {
        Ok(match raw {
            None => None,
            Some(i) => {
                let name = i.get_ref();
                if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == '/') {
                    return Err(self.err(
                        i.span(),
                        format!(
                            "invalid rendezvous.interface {name:?}: expected a network interface \
                         name such as \"eth0\" (non-empty, no whitespace or '/')"
                        ),
                    ));
                }
                Some(i.into_inner())
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn rendezvous_port_auto_and_fixed() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}[rendezvous]\n");
        assert_eq!(parse_ok(&format!("{base}port = \"auto\"\n")).rendezvous.port, PortSpec::Auto);
        assert_eq!(parse_ok(&format!("{base}port = 65535\n")).rendezvous.port, PortSpec::Fixed(65535));
        assert_eq!(parse_ok(&format!("{base}port_range = [5, 5]\n")).rendezvous.port_range, (5, 5));
    }

    #[test]
    fn the_master_is_no_spare() {
        let text = "[[nodes]]\nhost = \"n[1-3]\"\n[job]\nscript = \"t.py\"\nnnodes = 2\n[rendezvous]\nmaster = \"n3\"\n";
        assert_err(
            text,
            7,
            10,
            "rendezvous.master \"n3\" is a spare (job.nnodes = 2 makes the nodes after the first 2 spares): name one of the first 2, or leave it out for node rank 0",
        );
        assert_eq!(parse_ok(&text.replace("\"n3\"", "\"n2\"")).rendezvous.master.as_deref(), Some("n2"));
    }

    #[test]
    fn master_must_be_a_node() {
        assert_err(
            &format!("[[nodes]]\nhost = \"gpu-[01-02]\"\n{JOB}[rendezvous]\nmaster = \"gpu-09\"\n"),
            6,
            10,
            "rendezvous.master \"gpu-09\" is not one of the nodes (gpu-01, gpu-02)",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"n[1-20]\"\n{JOB}[rendezvous]\nmaster = \"x\"\n"),
            6,
            10,
            "rendezvous.master \"x\" is not one of the nodes (n1, n2, n3, n4, n5, n6, n7, n8, ...)",
        );
        let text = format!("[[nodes]]\nhost = \"gpu-[01-02]\"\n{JOB}[rendezvous]\nmaster = \"gpu-02\"\n");
        assert_eq!(parse_ok(&text).rendezvous.master.as_deref(), Some("gpu-02"));
        let text = format!("[[nodes]]\nhost = \"gpu-[01-02]\"\n{JOB}[rendezvous]\nmaster = \"gpu-2\"\n");
        assert_eq!(help_of(&text).as_deref(), Some("did you mean \"gpu-02\"?"));
    }

    #[test]
    fn ports_out_of_range() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}");
        assert_err(
            &format!("[ssh]\nport = 0\n{base}"),
            2,
            8,
            "ssh.port: port 0 is out of range (expected 1-65535)",
        );
        assert_err(
            "[[nodes]]\nhost = \"a\"\nport = 65536\n",
            3,
            8,
            "nodes[0].port: port 65536 is out of range (expected 1-65535)",
        );
        assert_err(
            &format!("{base}[rendezvous]\nport = -1\n"),
            6,
            8,
            "rendezvous.port: port -1 is out of range (expected 1-65535)",
        );
        assert_err(
            &format!("{base}[rendezvous]\nport = \"29500\"\n"),
            6,
            8,
            "rendezvous.port must be \"auto\" or a port number 1-65535, found \"29500\"",
        );
        assert_err(
            &format!("{base}[rendezvous]\nport = 1.5\n"),
            6,
            8,
            "rendezvous.port must be \"auto\" or a port number 1-65535, found a float",
        );
    }

    #[test]
    fn port_range_invalid() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}[rendezvous]\n");
        assert_err(
            &format!("{base}port_range = [20000]\n"),
            6,
            14,
            "rendezvous.port_range must be two ports [lo, hi], found 1 values",
        );
        assert_err(
            &format!("{base}port_range = [40000, 20000]\n"),
            6,
            14,
            "rendezvous.port_range [40000, 20000] is empty: the first port must not be greater than the second",
        );
        assert_err(
            &format!("{base}port_range = [0, 20000]\n"),
            6,
            15,
            "rendezvous.port_range: port 0 is out of range (expected 1-65535)",
        );
        assert_err(
            &format!("{base}port_range = [1, 70000]\n"),
            6,
            18,
            "rendezvous.port_range: port 70000 is out of range (expected 1-65535)",
        );
    }
}
