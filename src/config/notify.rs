//! `[notify]`: a command run on the launching machine at a run's notable events.

use super::check::*;
use super::raw::*;
use super::types::*;

impl Cx<'_> {
    pub(super) fn notify(&self, raw: RawNotify) -> Result<Notify> {
        if raw.command.get_ref().trim().is_empty() {
            return Err(self.err(raw.command.span(), "notify.command must not be empty"));
        }
        let timeout = match &raw.timeout {
            Some(t) => self.positive_duration(t, "notify.timeout")?,
            None => DEFAULT_NOTIFY_TIMEOUT,
        };
        Ok(Notify { command: raw.command.into_inner(), timeout })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn a_notify_command_with_its_timeout() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}[notify]\n");
        let n = parse_ok(&format!("{base}command = \"curl -d @- http://hook\"\n")).notify.unwrap();
        assert_eq!((n.command.as_str(), n.timeout), ("curl -d @- http://hook", DEFAULT_NOTIFY_TIMEOUT));
        let n = parse_ok(&format!("{base}command = \"x\"\ntimeout = \"3s\"\n")).notify.unwrap();
        assert_eq!(n.timeout, Duration::from_secs(3));
        assert_err(&format!("{base}command = \" \"\n"), 6, 11, "notify.command must not be empty");
    }
}
