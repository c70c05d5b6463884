//! PyTorch's NCCL flight recorder, the evidence of a GPU job's collective timeout: each
//! rank's last collectives, dumped by the rank itself when its watchdog fires. The plan turns
//! it on for GPU jobs (see `plan::NCCL_FLIGHT_RECORDER`) with each attempt's dumps in a
//! folder of the workdir on the node; after a failed attempt herd copies the dumps of each
//! node's own ranks into the run's `attempt-<k>/nccl/`. Pure: the script that prints them on
//! a node, and the reading of what it printed.

use std::ops::Range;

use serde::Serialize;

use crate::remote::quote;

/// The folder, relative to the workdir, where the ranks of attempt `attempt` dump: each rank
/// to `rank_<global rank>` in it (the dump variable's value is this folder and `/rank_`).
pub fn dump_dir(run_id: &str, attempt: u32) -> String {
    format!("herd-nccl/{run_id}/attempt-{attempt}")
}

/// A dump larger than this stays on the node, and herd says where.
pub const MAX_DUMP: u64 = 16 << 20;

/// One rank's dump, or why herd has none of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankDump {
    pub rank: u32,
    #[serde(skip)]
    pub bytes: Result<Vec<u8>, String>,
}

/// What a node prints of its ranks' dumps in `dir` under `workdir`: for each rank with one,
/// `herd-dump R N` and a newline, then its N bytes; `herd-dump R too-large N` for one over
/// `MAX_DUMP`. A rank without a dump prints nothing: most failures have none. In `sh`, the
/// size read once, and exactly that many bytes sent.
pub fn script(workdir: &str, dir: &str, ranks: Range<u32>) -> String {
    let ranks: Vec<String> = ranks.map(|r| r.to_string()).collect();
    format!(
        "cd -- {}/{} 2>/dev/null || exit 0; for r in {}; do f=rank_$r; [ -f \"$f\" ] || continue; \
         n=$(wc -c <\"$f\") || continue; n=$((n + 0)); \
         if [ \"$n\" -gt {MAX_DUMP} ]; then echo \"herd-dump $r too-large $n\"; continue; fi; \
         echo \"herd-dump $r $n\"; head -c \"$n\" \"$f\"; done",
        quote(workdir.trim_end_matches('/')),
        quote(dir),
        ranks.join(" ")
    )
}

/// The dumps in `out`, as `script` printed them. A line that is no header is skipped (what a
/// login shell printed first); a frame cut short (the node went, or the file shrank) ends the
/// reading, with that rank's dump said to be cut.
pub fn parse(out: &[u8], dir_on_node: &str) -> Vec<RankDump> {
    let mut dumps = Vec::new();
    let mut rest = out;
    while !rest.is_empty() {
        let Some(eol) = rest.iter().position(|b| *b == b'\n') else { break };
        let header = String::from_utf8_lossy(&rest[..eol]).into_owned();
        rest = &rest[eol + 1..];
        let words: Vec<&str> = header.split(' ').collect();
        let (rank, size) = match words[..] {
            ["herd-dump", rank, "too-large", size] => {
                let (Ok(rank), Ok(size)) = (rank.parse(), size.parse::<u64>()) else { continue };
                let why = format!(
                    "its dump ({} MiB) is over {} MiB: left on the node at {dir_on_node}/rank_{rank}",
                    size >> 20,
                    MAX_DUMP >> 20
                );
                dumps.push(RankDump { rank, bytes: Err(why) });
                continue;
            }
            ["herd-dump", rank, size] => match (rank.parse::<u32>(), size.parse::<usize>()) {
                (Ok(rank), Ok(size)) => (rank, size),
                _ => continue,
            },
            _ => continue,
        };
        if rest.len() < size {
            let why = format!("its dump was cut short ({} of {size} bytes came)", rest.len());
            dumps.push(RankDump { rank, bytes: Err(why) });
            break;
        }
        dumps.push(RankDump { rank, bytes: Ok(rest[..size].to_vec()) });
        rest = &rest[size..];
    }
    dumps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_prints_only_the_nodes_own_ranks_from_the_attempts_folder() {
        let s = script("/shared/my job/", "herd-nccl/r1/attempt-2", 8..11);
        assert!(s.starts_with("cd -- '/shared/my job'/herd-nccl/r1/attempt-2 2>/dev/null || exit 0;"), "{s}");
        assert!(s.contains("for r in 8 9 10; do f=rank_$r;"), "{s}");
        assert!(s.contains(&format!("-gt {MAX_DUMP}")), "{s}");
    }

    #[test]
    fn dumps_are_read_by_their_sizes_whatever_bytes_they_hold() {
        let mut out = b"herd-dump 3 5\n\x00\nab\xffherd-dump 4 too-large 20000000\nherd-dump 5 0\n".to_vec();
        out.extend(b"herd-dump 6 10\nshort");
        let dumps = parse(&out, "/w/herd-nccl/r/attempt-0");
        assert_eq!(dumps[0], RankDump { rank: 3, bytes: Ok(b"\x00\nab\xff".to_vec()) });
        assert_eq!(dumps[1].rank, 4);
        assert_eq!(
            dumps[1].bytes,
            Err("its dump (19 MiB) is over 16 MiB: left on the node at /w/herd-nccl/r/attempt-0/rank_4"
                .into())
        );
        assert_eq!(dumps[2], RankDump { rank: 5, bytes: Ok(Vec::new()) });
        assert_eq!(
            dumps[3],
            RankDump { rank: 6, bytes: Err("its dump was cut short (5 of 10 bytes came)".into()) }
        );
        assert_eq!(dumps.len(), 4);
        // Nothing; what a login shell printed before.
        assert!(parse(b"", "/d").is_empty());
        assert_eq!(
            parse(b"Welcome!\nherd-dump 1 1\nx", "/d"),
            [RankDump { rank: 1, bytes: Ok(b"x".to_vec()) }]
        );
    }
}
