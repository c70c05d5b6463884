//! PyTorch's NCCL flight recorder, the evidence of a GPU job's collective timeout: each
//! rank's last collectives, dumped by the rank itself when its watchdog fires. The plan turns
//! it on for GPU jobs (see `plan::NCCL_FLIGHT_RECORDER`) with each attempt's dumps in a
//! folder of the workdir on the node; after a failed attempt herd copies the dumps of each
//! node's own ranks into the run's `attempt-<k>/nccl/`. Pure: the call of the node script that
//! prints them (`remote/nccl_dumps.sh`), and the reading of what it printed.

use std::ops::Range;

use serde::Serialize;

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

/// The command that prints a node's ranks' dumps in `dir` under `workdir` (`nccl_dumps.sh`,
/// in `sh`): a line `herd-dumps`, then each dump framed by its size, which `parse` reads; a
/// dump over `MAX_DUMP` is named, not sent.
pub fn command(workdir: &str, dir: &str, ranks: Range<u32>) -> String {
    let args = [workdir.to_string(), dir.to_string(), MAX_DUMP.to_string()];
    let args = args.into_iter().chain(ranks.map(|r| r.to_string()));
    crate::remote::shell::script_call(crate::remote::scripts::NCCL_DUMPS_SCRIPT, "herd-nccl-dumps", args)
}

/// The dumps in `out`, as `command` printed them: what comes before the `herd-dumps` line is
/// a login shell's. A frame cut short or out of step (the node went, the file shrank) ends
/// the reading, with that rank's dump said to be cut.
pub fn parse(out: &[u8], dir_on_node: &str) -> Vec<RankDump> {
    let mut dumps = Vec::new();
    const START: &[u8] = b"\nherd-dumps\n";
    let Some(start) = out.windows(START.len()).position(|w| w == START) else { return dumps };
    let mut rest = &out[start + START.len()..];
    while !rest.is_empty() {
        let Some(eol) = rest.iter().position(|b| *b == b'\n') else { break };
        let header = String::from_utf8_lossy(&rest[..eol]).into_owned();
        rest = &rest[eol + 1..];
        let words: Vec<&str> = header.split(' ').collect();
        let (rank, size) = match words[..] {
            ["herd-dump", rank, "too-large", size] => {
                let (Ok(rank), Ok(size)) = (rank.parse(), size.parse::<u64>()) else { break };
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
                _ => break,
            },
            _ => break,
        };
        let end = format!("\nherd-dump-end {rank}\n");
        if rest.len() < size + end.len() || !rest[size..].starts_with(end.as_bytes()) {
            let why =
                format!("its dump came cut short or garbled ({} bytes after a header of {size})", rest.len());
            dumps.push(RankDump { rank, bytes: Err(why) });
            break;
        }
        dumps.push(RankDump { rank, bytes: Ok(rest[..size].to_vec()) });
        rest = &rest[size + end.len()..];
    }
    dumps
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped script, run here: the node's own ranks' dumps from the attempt's folder,
    /// whatever bytes they hold, framed as `parse` reads them after a login's greeting; one
    /// over `MAX_DUMP` named, not sent; no folder, no dumps.
    #[test]
    fn the_script_sends_only_the_nodes_own_ranks_from_the_attempts_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let workdir = format!("{}/my 'job'/", tmp.path().display());
        let dir = "herd-nccl/r1/attempt-2";
        let on_node = format!("{workdir}{dir}");
        std::fs::create_dir_all(&on_node).unwrap();
        std::fs::write(format!("{on_node}/rank_8"), b"\x00\nab\xff").unwrap();
        std::fs::File::create(format!("{on_node}/rank_10")).unwrap().set_len(MAX_DUMP + 1).unwrap();
        std::fs::write(format!("{on_node}/rank_11"), b"another node's").unwrap();
        std::fs::write(format!("{workdir}herd-nccl/r1/rank_9"), b"another attempt's").unwrap();
        let run = |dir: &str| {
            let shell = format!("echo 'hello from .bashrc'; {}", command(&workdir, dir, 8..11));
            let out = std::process::Command::new("sh").arg("-c").arg(shell).output().unwrap();
            assert!(out.status.success(), "{out:?}");
            parse(&out.stdout, &on_node)
        };
        let dumps = run(dir);
        assert_eq!(dumps.len(), 2, "{dumps:?}");
        assert_eq!(dumps[0], RankDump { rank: 8, bytes: Ok(b"\x00\nab\xff".to_vec()) });
        assert_eq!(dumps[1].rank, 10);
        assert!(dumps[1].bytes.as_ref().is_err_and(|e| e.contains("left on the node")), "{dumps:?}");
        assert!(run("herd-nccl/r1/attempt-3").is_empty());
    }

    fn frame(rank: u32, bytes: &[u8]) -> Vec<u8> {
        let mut f = format!("herd-dump {rank} {}\n", bytes.len()).into_bytes();
        f.extend(bytes);
        f.extend(format!("\nherd-dump-end {rank}\n").into_bytes());
        f
    }

    #[test]
    fn dumps_are_read_by_their_sizes_whatever_bytes_they_hold() {
        // A login shell's greeting, without a newline, comes first.
        let mut out = b"Welcome!\nherd-dump 9 1\nx\nherd-dumps\n".to_vec();
        out.extend(frame(3, b"\x00\nab\xff"));
        out.extend(b"herd-dump 4 too-large 20000000\n");
        out.extend(frame(5, b""));
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
        assert_eq!(dumps[3].rank, 6);
        assert!(
            dumps[3].bytes.as_ref().is_err_and(|e| e.starts_with("its dump came cut short")),
            "{dumps:?}"
        );
        assert_eq!(dumps.len(), 4);
        assert!(parse(b"", "/d").is_empty());
        assert!(parse(b"herd-dump 1 1\nx\nherd-dump-end 1\n", "/d").is_empty(), "no start line: not ours");
    }

    #[test]
    fn a_frame_out_of_step_is_not_taken_for_a_dump() {
        // Rank 1's file shrank to 2 bytes after its size was read: its frame holds the start
        // of rank 2's; neither is taken as a dump.
        let mut out = b"\nherd-dumps\nherd-dump 1 6\nab".to_vec();
        out.extend(frame(2, b"cd"));
        let dumps = parse(&out, "/d");
        assert_eq!(dumps.len(), 1, "{dumps:?}");
        assert!(dumps[0].rank == 1 && dumps[0].bytes.is_err(), "{dumps:?}");
    }
}
