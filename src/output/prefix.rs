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
}
