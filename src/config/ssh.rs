//! `[ssh]`: how herd logs in to the nodes.

use super::check::*;
use super::raw::*;
use super::suggest;
use super::types::*;

impl Cx<'_> {
    pub(super) fn ssh(&self, raw: Option<RawSsh>) -> Result<SshSettings> {
        let Some(raw) = raw else {
            return Ok(SshSettings::default());
        };
        let known_hosts = match &raw.known_hosts {
            None => KnownHostsPolicy::Strict,
            Some(v) => KnownHostsPolicy::parse(v.get_ref()).ok_or_else(|| {
                self.err(
                    v.span(),
                    format!(
                        "unknown known_hosts policy {:?}: expected one of strict, accept-new",
                        v.get_ref()
                    ),
                )
                .with_help(suggest::help_for(
                    v.get_ref(),
                    KnownHostsPolicy::ALL.map(KnownHostsPolicy::as_str),
                ))
            })?,
        };
        Ok(SshSettings {
            user: raw.user.map(|u| self.user(u, "ssh.user")).transpose()?,
            port: raw.port.map(|p| self.port(&p, "ssh.port")).transpose()?,
            identity_file: raw.identity_file.map(|f| self.non_empty(f, "ssh.identity_file")).transpose()?,
            known_hosts,
            known_hosts_file: raw
                .known_hosts_file
                .map(|f| self.non_empty(f, "ssh.known_hosts_file"))
                .transpose()?,
            connect_timeout: match &raw.connect_timeout {
                Some(d) => self.positive_duration(d, "ssh.connect_timeout")?,
                None => DEFAULT_CONNECT_TIMEOUT,
            },
            login_timeout: match &raw.login_timeout {
                Some(d) => self.positive_duration(d, "ssh.login_timeout")?,
                None => DEFAULT_LOGIN_TIMEOUT,
            },
        })
    }
}
