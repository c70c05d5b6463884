//! The `[rank host] ` prefix put in front of every line a node prints. Pure.

const PALETTE: [u8; 6] = [36, 33, 32, 35, 34, 31];

/// Prefixes for all nodes (`hosts` in node-rank order), padded to one width so that the
/// job's own text lines up.
pub fn prefixes(hosts: &[String], color: bool) -> Vec<Vec<u8>> {
    let rank_w = hosts.len().saturating_sub(1).to_string().len();
    let host_w = hosts.iter().map(String::len).max().unwrap_or(0);
    hosts
        .iter()
        .enumerate()
        .map(|(rank, host)| {
            let plain = format!("[{rank:>rank_w$} {host:<host_w$}]");
            let s = if color {
                format!("\x1b[{}m{plain}\x1b[0m ", PALETTE[rank % PALETTE.len()])
            } else {
                format!("{plain} ")
            };
            s.into_bytes()
        })
        .collect()
}

/// The `[rR host] ` prefixes of the workers' lines: the global rank, and the node it runs on.
/// Short at 1,024 ranks, one width for all.
pub struct RankPrefixes {
    hosts: Vec<String>,
    color: bool,
    /// By global rank, once the run said how many each node has.
    ranks: Vec<Vec<u8>>,
    /// For a rank the run did not announce: built on the way.
    other: Vec<u8>,
}

impl RankPrefixes {
    pub fn new(hosts: Vec<String>, color: bool) -> RankPrefixes {
        RankPrefixes { hosts, color, ranks: Vec::new(), other: Vec::new() }
    }

    /// The ranks each node runs (`nprocs` by node rank), in rank order.
    pub fn set_ranks(&mut self, nprocs: &[u32]) {
        let world: u32 = nprocs.iter().sum();
        let rank_w = world.saturating_sub(1).to_string().len();
        let host_w = self.hosts.iter().map(String::len).max().unwrap_or(0);
        self.ranks = nprocs
            .iter()
            .enumerate()
            .flat_map(|(node, n)| (0..*n).map(move |_| node))
            .enumerate()
            .map(|(rank, node)| self.render(rank as u32, node, rank_w, host_w))
            .collect();
    }

    fn render(&self, rank: u32, node: usize, rank_w: usize, host_w: usize) -> Vec<u8> {
        let host = self.hosts.get(node).map_or("?", String::as_str);
        let plain = format!("[r{rank:<rank_w$} {host:<host_w$}]");
        if self.color {
            format!("\x1b[{}m{plain}\x1b[0m ", PALETTE[node % PALETTE.len()]).into_bytes()
        } else {
            format!("{plain} ").into_bytes()
        }
    }

    /// The prefix of rank `rank`'s lines, which came from node `node`.
    pub fn get(&mut self, rank: u32, node: usize) -> &[u8] {
        match self.ranks.get(rank as usize) {
            Some(p) => p,
            None => {
                self.other = self.render(rank, node, 0, 0);
                &self.other
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_share_one_width() {
        let nodes: Vec<String> =
            (0..11).map(|i| if i == 3 { "gpu-long-03".into() } else { format!("g{i}") }).collect();
        let p = prefixes(&nodes, false);
        assert_eq!(p[0], b"[ 0 g0         ] ");
        assert_eq!(p[3], b"[ 3 gpu-long-03] ");
        assert_eq!(p[10], b"[10 g10        ] ");
        assert!(p.iter().all(|x| x.len() == p[0].len()));
        let c = prefixes(&nodes[..1], true);
        assert_eq!(c[0], b"\x1b[36m[0 g0]\x1b[0m ");
    }

    #[test]
    fn rank_prefixes_name_the_global_rank_and_its_node() {
        let mut p = RankPrefixes::new(vec!["gpu-01".into(), "gpu-2".into()], false);
        p.set_ranks(&[8, 8]);
        assert_eq!(p.get(0, 0), b"[r0  gpu-01] ");
        assert_eq!(p.get(13, 1), b"[r13 gpu-2 ] ");
        // At 1,024 ranks, still short.
        let hosts: Vec<String> = (0..128).map(|i| format!("gpu-{i:03}")).collect();
        let mut p = RankPrefixes::new(hosts, false);
        p.set_ranks(&[8; 128]);
        assert_eq!(p.get(1023, 127), b"[r1023 gpu-127] ");
    }
}
