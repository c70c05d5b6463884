//! Every config value that reaches a node's shell arrives as data, never as code: each hostile
//! string goes through config → plan → the agent's remote command line, run by `sh -c` as a
//! login shell runs what sshd hands it, and must neither run anything nor arrive changed.
//!
//! The launchers (`torchrun`, `python3`, `docker`) are fakes first on `PATH` that record their
//! argv and environment, so no torch is needed.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use herd::plan::{self, AttemptValues, PlanInputs};
use herd::remote::agent::AgentInvocation;

/// Shell metacharacters, each wrapped around an attempt to create `{pwned}`.
const PAYLOADS: &[&str] = &[
    "$(touch {pwned})",
    "`touch {pwned}`",
    "'; touch {pwned}; '",
    "\"; touch {pwned}; \"",
    "\\\"$(touch {pwned})\\\"",
    "x\ntouch {pwned}\n",
    "; touch {pwned}",
    "$HOME'\"`;\\|&<>*?~{pwned}",
    // No white space, so that values the config checks for it (an image name) get through.
    "$(touch${IFS}{pwned})",
];

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        // Each fake writes its argv (NUL-separated, one file per call: with [container] the
        // agent also runs `docker rm`) and its environment, then succeeds.
        let fake = "#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\" > \"$HERD_T_RECORD.argv.$$\"\nenv -0 > \"$HERD_T_RECORD.env\"\n";
        // The fake python3 passes the output multiplexer's argv through (`-IS -c MUX CMD...`):
        // CMD is the launcher line, run as the multiplexer would.
        let python = format!(
            "#!/bin/sh\nif [ \"$1\" = -IS ] && [ \"$2\" = -c ]; then shift 3; exec \"$@\"; fi\n{}",
            &fake[10..]
        );
        for name in ["torchrun", "python3", "docker", "train.py"] {
            let path = bin.join(name);
            std::fs::write(&path, if name == "python3" { python.as_str() } else { fake }).unwrap();
            Command::new("chmod").arg("+x").arg(&path).status().unwrap();
        }
        Sandbox { dir }
    }

    fn pwned(&self) -> PathBuf {
        self.dir.path().join("pwned")
    }

    fn record(&self) -> PathBuf {
        self.dir.path().join("record")
    }

    /// The payload with its target filled in.
    fn payload(&self, template: &str) -> String {
        template.replace("{pwned}", self.pwned().to_str().unwrap())
    }

    /// Build the plan from `toml`, then run node 0's agent through `sh -c`, as sshd does.
    /// Returns the job's stdout.
    fn run(&self, toml: &str, launch_env: &[(&str, &str)]) -> String {
        let config =
            herd::config::parse(Path::new("/x/c.toml"), toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
        self.run_config(&config, launch_env)
    }

    fn run_config(&self, config: &herd::config::Config, launch_env: &[(&str, &str)]) -> String {
        let env: BTreeMap<String, String> =
            launch_env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let plan = plan::build(
            config,
            &PlanInputs { cwd: self.dir.path().display().to_string(), env, ..Default::default() },
        );
        let node = &plan.nodes[0];
        // A run id of its own: tests run at once, and an agent stops every process that holds
        // its exact marker.
        let run_id = self.dir.path().file_name().unwrap().to_string_lossy().replace('.', "");
        let values = AttemptValues { run_id: &run_id, attempt: 0, master_port: 29500, interfaces: &[] };
        let inv = AgentInvocation {
            grace_secs: 1,
            heartbeat_secs: 60,
            cleanup: plan.container_cleanup(node, &values),
            ..plan.agent(plan.marker(node, &values), plan.job_snippet(node))
        };
        let path = format!("{}:/usr/bin:/bin", self.dir.path().join("bin").display());
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(inv.remote_command())
            .env("PATH", path)
            .env("HERD_T_RECORD", self.record())
            .current_dir(self.dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&node.env_block(&values)).unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let agent = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let mut out = String::new();
        child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        drop(stdin);
        child.wait().unwrap();
        out + &agent.join().unwrap()
    }

    /// Every word of every recorded call.
    fn argv(&self) -> Vec<String> {
        let mut words = Vec::new();
        for entry in std::fs::read_dir(self.dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().unwrap().to_string_lossy().starts_with("record.argv.") {
                let raw = std::fs::read(&path).unwrap();
                words.extend(
                    raw.split(|&b| b == 0)
                        .filter(|w| !w.is_empty())
                        .map(|w| String::from_utf8_lossy(w).into_owned()),
                );
            }
        }
        words
    }

    fn forget_calls(&self) {
        for entry in std::fs::read_dir(self.dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().unwrap().to_string_lossy().starts_with("record.") {
                std::fs::remove_file(path).unwrap();
            }
        }
    }

    fn env(&self) -> Vec<String> {
        let raw = std::fs::read(self.record().with_extension("env")).unwrap_or_default();
        raw.split(|&b| b == 0).map(|w| String::from_utf8_lossy(w).into_owned()).collect()
    }

    fn assert_nothing_ran(&self, field: &str, payload: &str, out: &str) {
        assert!(!self.pwned().exists(), "{field} = {payload:?} ran a command on the node\n{out}");
    }
}

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

const NODE: &str = "[[nodes]]\nhost = \"n1\"\n";

#[test]
fn argv_fields_arrive_as_one_word_and_run_nothing() {
    for template in PAYLOADS {
        let sb = Sandbox::new();
        let p = sb.payload(template);
        let q = toml_str(&p);
        let cases = [
            ("job.args", format!("{NODE}[job]\nscript = \"train.py\"\nargs = [{q}]\n")),
            ("job.launcher_args", format!("{NODE}[job]\nscript = \"train.py\"\nlauncher_args = [{q}]\n")),
            ("job.script", format!("{NODE}[job]\nscript = {q}\n")),
            (
                "job.args (command)",
                format!("{NODE}[job]\nlauncher = \"command\"\nscript = \"train.py\"\nargs = [{q}]\n"),
            ),
            (
                "job.args (deepspeed)",
                format!("{NODE}[job]\nlauncher = \"deepspeed\"\nscript = \"train.py\"\nargs = [{q}]\n"),
            ),
            (
                "container.args",
                format!("{NODE}[job]\nscript = \"train.py\"\n[container]\nimage = \"img\"\nargs = [{q}]\n"),
            ),
        ];
        for (field, toml) in cases {
            sb.forget_calls();
            let out = sb.run(&toml, &[]);
            sb.assert_nothing_ran(field, &p, &out);
            let argv = sb.argv();
            assert!(argv.contains(&p), "{field} = {p:?} did not arrive as one word: {argv:?}\n{out}");
        }
        // The image name is checked for white space; whatever gets through is one word too.
        let toml = format!("{NODE}[job]\nscript = \"train.py\"\n[container]\nimage = {q}\n");
        if let Ok(config) = herd::config::parse(Path::new("/x/c.toml"), &toml) {
            sb.forget_calls();
            let out = sb.run_config(&config, &[]);
            sb.assert_nothing_ran("container.image", &p, &out);
            assert!(sb.argv().contains(&p), "container.image = {p:?} did not arrive as one word\n{out}");
        }
    }
}

#[test]
fn env_values_arrive_unchanged_and_run_nothing() {
    for template in PAYLOADS {
        let sb = Sandbox::new();
        let p = sb.payload(template);
        let q = toml_str(&p);
        let toml = format!(
            "[[nodes]]\nhost = \"n1\"\nenv = {{ HERD_T_NODE = {q} }}\n[job]\nscript = \"train.py\"\nforward_env = [\"HERD_T_SECRET\"]\n[env]\nHERD_T_ALL = {q}\n"
        );
        let out = sb.run(&toml, &[("HERD_T_SECRET", &p)]);
        sb.assert_nothing_ran("env", &p, &out);
        let env = sb.env();
        for name in ["HERD_T_NODE", "HERD_T_ALL", "HERD_T_SECRET"] {
            assert!(env.contains(&format!("{name}={p}")), "{name} = {p:?} arrived changed\n{env:?}");
        }
    }
}

#[test]
fn workdir_and_python_run_nothing_whether_or_not_they_exist() {
    for template in PAYLOADS {
        let sb = Sandbox::new();
        let p = sb.payload(template);
        // A workdir that does not exist: the error message is where the injection was.
        let missing = format!("/nonexistent/{p}");
        let toml = format!("{NODE}[job]\nscript = \"train.py\"\nworkdir = {}\n", toml_str(&missing));
        let out = sb.run(&toml, &[]);
        sb.assert_nothing_ran("job.workdir (missing)", &p, &out);
        assert!(out.contains("herd: cannot enter workdir"), "{out}");

        // One that exists: the job runs in it.
        let existing = sb.dir.path().join("wd").join(p.trim_start_matches('/'));
        std::fs::create_dir_all(&existing).unwrap();
        let toml = format!(
            "{NODE}[job]\nscript = \"train.py\"\nworkdir = {}\n",
            toml_str(existing.to_str().unwrap())
        );
        let out = sb.run(&toml, &[]);
        sb.assert_nothing_ran("job.workdir", &p, &out);
        assert!(!sb.argv().is_empty(), "the job did not run in workdir {existing:?}\n{out}");

        // An interpreter path is a command name, never a command line.
        let toml = format!(
            "{NODE}[job]\nlauncher = \"deepspeed\"\nscript = \"train.py\"\npython = {}\n",
            toml_str(&p)
        );
        let out = sb.run(&toml, &[]);
        sb.assert_nothing_ran("job.python", &p, &out);
    }
}
