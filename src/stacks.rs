//! Every rank's Python stack when a job hangs, as py-spy dumps it: where each rank is, and
//! which rank is the odd one out. Pure: the agent runs py-spy, the output writes the files.
//!
//! A rank's place is the innermost frame of its main thread, at the innermost line of the
//! user's own code (not the interpreter's library, not site-packages): `all_reduce
//! (train.py:42)` for a rank inside a collective called from line 42, `main (train.py:57)`
//! for a rank sleeping there. Ranks are grouped by place; when one group is smaller than all
//! the others, its ranks are the likely culprits: the others wait for them. In a live job's
//! stacks (`herd stacks`), only when every other rank also waits in a collective (see `Taken`).

use serde::Serialize;

/// One rank's dump: py-spy's text, or why there is none (py-spy missing, ptrace refused, no
/// answer in time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankStack {
    pub rank: u32,
    pub pid: u32,
    #[serde(skip)]
    pub dump: Result<String, String>,
}

impl RankStack {
    /// What its file shows: the dump, or why there is none.
    pub fn text(&self) -> String {
        match &self.dump {
            Ok(dump) => format!("{}\n", dump.trim_end()),
            Err(why) => format!("no stack for rank {} (pid {}): {why}\n", self.rank, self.pid),
        }
    }
}

/// One frame of a dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub name: String,
    pub file: String,
    pub line: u32,
}

/// Ranks at the same place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    pub place: String,
    pub ranks: Vec<u32>,
}

/// What the stacks of one attempt say.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Largest group first.
    pub groups: Vec<Group>,
    /// The place of the likely culprits, one of `groups`; `None` when no group stands out.
    pub culprit: Option<Group>,
    /// Ranks with no stack, and why.
    pub missing: Vec<(u32, String)>,
}

/// The frames of the main thread (else the first thread), innermost first, from py-spy's
/// `dump` text: a `Thread ...` header, then one `    name (file:line)` line per frame.
pub fn main_thread(dump: &str) -> Vec<Frame> {
    let mut threads: Vec<(bool, Vec<Frame>)> = Vec::new();
    for line in dump.lines() {
        if line.starts_with("Thread ") {
            threads.push((line.ends_with("\"MainThread\""), Vec::new()));
        } else if let (Some((_, frames)), Some(frame)) = (threads.last_mut(), frame(line)) {
            frames.push(frame);
        }
    }
    let main = threads.iter().position(|(main, _)| *main).unwrap_or(0);
    threads.into_iter().nth(main).map(|(_, f)| f).unwrap_or_default()
}

fn frame(line: &str) -> Option<Frame> {
    let rest = line.strip_prefix("    ")?.trim_end();
    let (name, place) = rest.strip_suffix(')')?.rsplit_once(" (")?;
    let (file, line) = place.rsplit_once(':')?;
    Some(Frame { name: name.to_string(), file: file.to_string(), line: line.parse().ok()? })
}

/// Whether a file is the interpreter's or an installed package's, not the user's.
fn library(file: &str) -> bool {
    file.contains("/site-packages/")
        || file.contains("/dist-packages/")
        || file.contains("/lib/python3")
        || file.starts_with('<')
}

/// Whether a rank waits in a collective: its innermost frame is torch.distributed's (or
/// DeepSpeed's communication layer's).
fn in_collective(frames: &[Frame]) -> bool {
    frames
        .first()
        .is_some_and(|f| f.file.contains("/torch/distributed/") || f.file.contains("/deepspeed/comm/"))
}

/// Where a rank is (see the module's words); paths under `workdir` are shown relative to it.
pub fn place(frames: &[Frame], workdir: &str) -> Option<String> {
    let innermost = frames.first()?;
    let at = frames.iter().find(|f| !library(&f.file)).unwrap_or(innermost);
    let prefix = format!("{}/", workdir.trim_end_matches('/'));
    let file = at.file.strip_prefix(&prefix).unwrap_or(&at.file);
    Some(format!("{} ({file}:{})", innermost.name, at.line))
}

/// When the stacks were taken, which says how much a smaller group means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Inside a run, after `hang_timeout` with no progress or when a rank failed: the ranks
    /// that did their part wait for the others, in a collective or, with NCCL (whose
    /// `all_reduce` returns at once), at a later synchronisation in the user's code
    /// (`loss.item()`, `cuda.synchronize()`). The smaller group is the odd one out.
    Stalled,
    /// From a live job, presumably healthy (`herd stacks`): its ranks are caught at different
    /// lines all the time, so a group is named only when every other rank waits in a
    /// collective (see `odd_group`).
    Live,
}

/// Group every rank's stack by place, and name the odd group (see `Taken`).
pub fn summarize(stacks: &[RankStack], workdir: &str, taken: Taken) -> Summary {
    let mut summary = Summary::default();
    // The places where a rank of a live job is not waiting in a collective.
    let mut busy: Vec<String> = Vec::new();
    let mut sorted: Vec<&RankStack> = stacks.iter().collect();
    sorted.sort_by_key(|s| s.rank);
    for s in sorted {
        let frames = match &s.dump {
            Ok(text) => main_thread(text),
            Err(why) => {
                summary.missing.push((s.rank, why.clone()));
                continue;
            }
        };
        let Some(place) = place(&frames, workdir) else {
            summary.missing.push((s.rank, "py-spy printed no Python frame".into()));
            continue;
        };
        if taken == Taken::Live && !in_collective(&frames) {
            busy.push(place.clone());
        }
        match summary.groups.iter_mut().find(|g| g.place == place) {
            Some(g) => g.ranks.push(s.rank),
            None => summary.groups.push(Group { place, ranks: vec![s.rank] }),
        }
    }
    summary.groups.sort_by_key(|g| std::cmp::Reverse(g.ranks.len()));
    summary.culprit = odd_group(&summary.groups, &busy);
    summary
}

/// The group the others wait for: smaller than every other group, while no rank of the
/// others is `busy` (at a place outside a collective; only a live job's stacks count any).
/// In a live job a smaller group alone is no sign: py-spy's dumps are a snapshot, not taken
/// at one instant, and a healthy job's ranks are caught at different lines all the time
/// (most sleeping or computing in the user's code, one already in its all_reduce): that named
/// a culprit in a healthy job. There, where the others do not sit in a collective, no culprit
/// is named: none rather than a wrong one. After a stall nobody moves any more, and the odd
/// group stands out wherever the others wait.
fn odd_group(groups: &[Group], busy: &[String]) -> Option<Group> {
    let [others @ .., second, last] = groups else { return None };
    let waiting = |g: &Group| !busy.contains(&g.place);
    let stands_out = last.ranks.len() < second.ranks.len();
    (stands_out && waiting(second) && others.iter().all(waiting)).then(|| last.clone())
}

impl Summary {
    /// `5 ranks in all_reduce (train.py:42); 1 rank (5) in main (train.py:57), the likely culprit`,
    /// for a terminal.
    pub fn words(&self) -> String {
        let mut parts: Vec<String> = self
            .groups
            .iter()
            .map(|g| {
                let n = g.ranks.len();
                let which = if n <= 4 {
                    format!(" ({})", g.ranks.iter().map(u32::to_string).collect::<Vec<_>>().join(", "))
                } else {
                    String::new()
                };
                let odd = if self.culprit.as_ref() == Some(g) { ", the likely culprit" } else { "" };
                // A place is the job's own text (a script's path): shown as `herd plan` shows
                // paths, its control characters escaped.
                let place = crate::lines::printable(&g.place);
                format!("{n} rank{}{which} in {place}{odd}", if n == 1 { "" } else { "s" })
            })
            .collect();
        if !self.missing.is_empty() {
            parts.push(format!("{} without a stack", self.missing.len()));
        }
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IN_ALL_REDUCE: &str =
        "Process 71: python3 -u examples/allreduce.py\nPython v3.11.7 (/usr/bin/python3.11)\n\n\
        Thread 71 (idle): \"MainThread\"\n    \
        all_reduce (/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:2955)\n    \
        wrapper (/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py:81)\n    \
        main (/work/examples/allreduce.py:61)\n    <module> (/work/examples/allreduce.py:90)\n\
        Thread 80 (idle): \"Thread-1\"\n    wait (/usr/lib/python3.11/threading.py:320)\n";
    const SLEEPING: &str =
        "Thread 72 (idle): \"MainThread\"\n    main (/work/examples/allreduce.py:57)\n    \
        <module> (/work/examples/allreduce.py:90)\n";

    fn stack(rank: u32, dump: Result<&str, &str>) -> RankStack {
        RankStack { rank, pid: 100 + rank, dump: dump.map(String::from).map_err(String::from) }
    }

    #[test]
    fn a_ranks_place_is_its_innermost_frame_at_the_users_line() {
        let frames = main_thread(IN_ALL_REDUCE);
        assert_eq!(frames.len(), 4, "{frames:?}");
        assert_eq!(place(&frames, "/work").as_deref(), Some("all_reduce (examples/allreduce.py:61)"));
        assert_eq!(
            place(&main_thread(SLEEPING), "/work/").as_deref(),
            Some("main (examples/allreduce.py:57)")
        );
        // Only library frames: the innermost one, where it is.
        let lib = "Thread 1 (active): \"MainThread\"\n    poll (/usr/lib/python3.11/selectors.py:415)\n";
        assert_eq!(
            place(&main_thread(lib), "/w").as_deref(),
            Some("poll (/usr/lib/python3.11/selectors.py:415)")
        );
        assert_eq!(place(&main_thread("Process 1: x\n"), "/w"), None);
    }

    /// A script's path is any file name: an escape sequence in it reaches no terminal raw.
    #[test]
    fn a_place_with_control_characters_is_shown_escaped() {
        let path = "/work/ev\x1b]0;owned\x07il\x1b[2Jx.py";
        let dump = format!("Thread 72 (idle): \"MainThread\"\n    main ({path}:57)\n");
        let summary = summarize(&[stack(0, Ok(&dump)), stack(1, Ok(SLEEPING))], "/work", Taken::Live);
        assert_eq!(summary.groups[0].place, "main (ev\x1b]0;owned\x07il\x1b[2Jx.py:57)", "kept as it is");
        let words = summary.words();
        assert!(!words.chars().any(char::is_control), "{words:?}");
        assert!(words.contains("main (ev\\u{1b}]0;owned\\u{7}il\\u{1b}[2Jx.py:57)"), "{words}");
    }

    #[test]
    fn the_odd_group_is_the_likely_culprit() {
        let mut stacks: Vec<RankStack> =
            (0..6).filter(|r| *r != 4).map(|r| stack(r, Ok(IN_ALL_REDUCE))).collect();
        stacks.push(stack(4, Ok(SLEEPING)));
        // The others all in all_reduce: named after a stall and in a live job alike.
        assert_eq!(summarize(&stacks, "/work", Taken::Live), summarize(&stacks, "/work", Taken::Stalled));
        let s = summarize(&stacks, "/work", Taken::Stalled);
        assert_eq!(s.groups.len(), 2);
        assert_eq!(
            s.culprit,
            Some(Group { place: "main (examples/allreduce.py:57)".into(), ranks: vec![4] })
        );
        assert_eq!(
            s.words(),
            "5 ranks in all_reduce (examples/allreduce.py:61); 1 rank (4) in main (examples/allreduce.py:57), the likely culprit"
        );
        // Two groups of one size: nobody stands out.
        let even = [stack(0, Ok(IN_ALL_REDUCE)), stack(1, Ok(SLEEPING))];
        assert_eq!(summarize(&even, "/work", Taken::Stalled).culprit, None);
        // Everyone at one place: no culprit either.
        assert_eq!(summarize(&stacks[..3], "/work", Taken::Stalled).culprit, None);
    }

    #[test]
    fn a_healthy_job_caught_at_different_lines_has_no_culprit() {
        // Most ranks sleep between steps in their own code; one is caught in its all_reduce.
        let mut stacks: Vec<RankStack> = (0..5).map(|r| stack(r, Ok(SLEEPING))).collect();
        stacks.push(stack(5, Ok(IN_ALL_REDUCE)));
        let s = summarize(&stacks, "/work", Taken::Live);
        assert_eq!(s.groups.len(), 2);
        assert_eq!(s.culprit, None, "{}", s.words());
        assert!(!s.words().contains("culprit"), "{}", s.words());
        // Three places, the larger two in the user's code: no culprit either.
        let computing = "Thread 9 (active): \"MainThread\"\n    forward (/work/model.py:12)\n";
        let mut three: Vec<RankStack> = (0..3).map(|r| stack(r, Ok(SLEEPING))).collect();
        three.extend((3..5).map(|r| stack(r, Ok(computing))));
        three.push(stack(5, Ok(IN_ALL_REDUCE)));
        assert_eq!(summarize(&three, "/work", Taken::Live).culprit, None);
    }

    /// With NCCL, all_reduce returns at once: after a stall the ranks that did their part wait
    /// at a later synchronisation in the user's code, not in torch.distributed, and the one
    /// stuck in its data loader is still the odd one out. The same snapshot from a live job
    /// (`herd stacks`) names nobody: its ranks may just be caught at different lines.
    #[test]
    fn after_a_stall_the_odd_group_is_named_wherever_the_others_wait() {
        let synchronizing = "Thread 7 (idle): \"MainThread\"\n    \
            synchronize (/v/lib/python3.11/site-packages/torch/cuda/__init__.py:792)\n    \
            main (/work/train.py:55)\n    <module> (/work/train.py:90)\n";
        let loading = "Thread 8 (idle): \"MainThread\"\n    \
            poll (/usr/lib/python3.11/multiprocessing/connection.py:440)\n    \
            _next_data (/v/lib/python3.11/site-packages/torch/utils/data/dataloader.py:1285)\n    \
            main (/work/train.py:48)\n    <module> (/work/train.py:90)\n";
        let mut stacks: Vec<RankStack> =
            (0..6).map(|r| stack(r, Ok(if r == 3 { loading } else { synchronizing }))).collect();
        let s = summarize(&stacks, "/work", Taken::Stalled);
        assert_eq!(s.culprit, Some(Group { place: "poll (train.py:48)".into(), ranks: vec![3] }));
        assert_eq!(
            s.words(),
            "5 ranks in synchronize (train.py:55); 1 rank (3) in poll (train.py:48), the likely culprit"
        );
        // Waiting at `loss.item()` (no Python frame below the user's line) counts the same.
        let at_item = "Thread 9 (idle): \"MainThread\"\n    main (/work/train.py:56)\n";
        for s in stacks.iter_mut().filter(|s| s.rank != 3) {
            s.dump = Ok(at_item.into());
        }
        let s = summarize(&stacks, "/work", Taken::Stalled);
        assert_eq!(s.culprit.as_ref().map(|g| &g.ranks[..]), Some(&[3][..]), "{}", s.words());
        assert_eq!(summarize(&stacks, "/work", Taken::Live).culprit, None);
    }

    #[test]
    fn ranks_without_a_stack_say_why_and_the_rest_are_still_grouped() {
        let stacks = [
            stack(0, Ok(IN_ALL_REDUCE)),
            stack(1, Err("py-spy not found on the node (not on PATH, nor in the job's)")),
            stack(2, Ok("")),
        ];
        let s = summarize(&stacks, "/work", Taken::Stalled);
        assert_eq!(
            s.groups,
            [Group { place: "all_reduce (examples/allreduce.py:61)".into(), ranks: vec![0] }]
        );
        assert_eq!(s.missing.len(), 2);
        assert!(s.words().ends_with("; 2 without a stack"), "{}", s.words());
    }
}
