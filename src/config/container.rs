//! `[container]`: the launcher runs in a container on every node.

use super::check::*;
use super::raw::*;
use super::types::*;
use toml::Spanned;

impl Cx<'_> {
    pub(super) fn container(&self, raw: RawContainer) -> Result<Container> {
        let image = raw.image.get_ref();
        if image.is_empty() || image.starts_with('-') || image.contains(char::is_whitespace) {
            return Err(self.err(
                raw.image.span(),
                format!(
                    "invalid container.image {image:?}: expected an image reference such as \
                     \"nvcr.io/nvidia/pytorch:24.05-py3\" (non-empty, no whitespace, not starting with '-')"
                ),
            ));
        }
        let runtime = match &raw.runtime {
            None => ContainerRuntime::Docker,
            Some(r) => match r.get_ref().as_str() {
                "docker" => ContainerRuntime::Docker,
                "podman" => ContainerRuntime::Podman,
                other => {
                    return Err(self.err(
                        r.span(),
                        format!("unknown container.runtime {other:?}: expected \"docker\" or \"podman\""),
                    ))
                }
            },
        };
        let mounts = self.mounts(raw.mounts.unwrap_or_default())?;
        let shm_size = self.shm_size(raw.shm_size)?;
        Ok(Container {
            image: raw.image.into_inner(),
            runtime,
            args: raw.args.unwrap_or_default(),
            mounts,
            shm_size,
        })
    }

    /// `container.mounts`: each `src:dst` or `src:dst:options`.
    fn mounts(&self, raw: Vec<Spanned<String>>) -> Result<Vec<String>> {
        let mut mounts = Vec::new();
        for (i, mount) in raw.into_iter().enumerate() {
            if let Err(why) = check_mount(mount.get_ref()) {
                return Err(self.err(
                    mount.span(),
                    format!(
                        "invalid container.mounts[{i}] {:?}: {why}; write \"src:dst\" or \"src:dst:options\", \
                         e.g. \"/data:/data:ro\"",
                        mount.get_ref()
                    ),
                ));
            }
            mounts.push(mount.into_inner());
        }
        Ok(mounts)
    }

    /// `container.shm_size`: a size above zero, with an optional unit.
    fn shm_size(&self, raw: Option<Spanned<String>>) -> Result<String> {
        Ok(match raw {
            None => DEFAULT_SHM_SIZE.to_string(),
            Some(s) => {
                let text = s.get_ref();
                let digits = text.strip_suffix(['b', 'k', 'm', 'g']).unwrap_or(text);
                if digits.is_empty()
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                    || digits.bytes().all(|b| b == b'0')
                {
                    return Err(self.err(
                        s.span(),
                        format!(
                            "invalid container.shm_size {text:?}: expected a number above zero with an \
                             optional unit b, k, m or g, e.g. \"8g\""
                        ),
                    ));
                }
                s.into_inner()
            }
        })
    }
}

/// Whether `mount` is `src:dst` or `src:dst:options` with an absolute `dst` and a `src` that
/// is an absolute path or a volume name. `Err` says why not.
pub(super) fn check_mount(mount: &str) -> Result<(), String> {
    let parts: Vec<&str> = mount.split(':').collect();
    let (src, dst, opts) = match parts.as_slice() {
        [src, dst] => (*src, *dst, None),
        [src, dst, opts] => (*src, *dst, Some(*opts)),
        _ => return Err(format!("expected 2 or 3 parts separated by ':', found {}", parts.len())),
    };
    let volume_name = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    };
    if !(src.starts_with('/') || volume_name(src)) {
        return Err(format!("the source {src:?} must be an absolute path or a volume name"));
    }
    if !dst.starts_with('/') {
        return Err(format!("the destination {dst:?} must be an absolute path"));
    }
    if let Some(opts) = opts {
        if opts.is_empty()
            || !opts.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, ',' | '=' | '_' | '-'))
        {
            return Err(format!(
                "the options {opts:?} must be a comma-separated list such as \"ro\" or \"ro,z\""
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn container_table_parses_with_defaults() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}");
        assert_eq!(parse_ok(&base).container, None);
        let c = parse_ok(&format!("{base}[container]\nimage = \"pytorch:24\"\n")).container.unwrap();
        assert_eq!(
            c,
            Container {
                image: "pytorch:24".into(),
                runtime: ContainerRuntime::Docker,
                args: vec![],
                mounts: vec![],
                shm_size: "8g".into(),
            }
        );
        let text = format!(
            "{base}[container]\nimage = \"i\"\nruntime = \"podman\"\nargs = [\"--pull\", \"always\"]\n\
             mounts = [\"/data:/data:ro\", \"cache:/root/.cache\"]\nshm_size = \"512m\"\n"
        );
        let c = parse_ok(&text).container.unwrap();
        assert_eq!(c.runtime, ContainerRuntime::Podman);
        assert_eq!(c.args, ["--pull", "always"]);
        assert_eq!(c.mounts, ["/data:/data:ro", "cache:/root/.cache"]);
        assert_eq!(c.shm_size, "512m");
        assert_eq!(
            parse_ok(&format!("{base}[container]\nimage = \"i\"\nshm_size = \"1024\"\n"))
                .container
                .unwrap()
                .shm_size,
            "1024"
        );
    }

    #[test]
    fn container_errors_are_located() {
        let base = format!("[[nodes]]\nhost = \"a\"\n{JOB}[container]\n");
        assert_err(&format!("{base}runtime = \"docker\"\n"), 5, 1, "missing required key `image`");
        assert_err(
            &format!("{base}image = \"\"\n"),
            6,
            9,
            "invalid container.image \"\": expected an image reference such as \"nvcr.io/nvidia/pytorch:24.05-py3\" (non-empty, no whitespace, not starting with '-')",
        );
        assert_err(
            &format!("{base}image = \"--privileged\"\n"),
            6,
            9,
            "invalid container.image \"--privileged\": expected an image reference such as \"nvcr.io/nvidia/pytorch:24.05-py3\" (non-empty, no whitespace, not starting with '-')",
        );
        assert_err(
            &format!("{base}image = \"i\"\nruntime = \"lxc\"\n"),
            7,
            11,
            "unknown container.runtime \"lxc\": expected \"docker\" or \"podman\"",
        );
        assert_err(
            &format!("{base}image = \"i\"\nshm_size = \"8G\"\n"),
            7,
            12,
            "invalid container.shm_size \"8G\": expected a number above zero with an optional unit b, k, m or g, e.g. \"8g\"",
        );
        assert_err(
            &format!("{base}image = \"i\"\nshm_size = \"0m\"\n"),
            7,
            12,
            "invalid container.shm_size \"0m\": expected a number above zero with an optional unit b, k, m or g, e.g. \"8g\"",
        );
        assert_err(
            &format!("{base}image = \"i\"\nshm_size = \"g\"\n"),
            7,
            12,
            "invalid container.shm_size \"g\": expected a number above zero with an optional unit b, k, m or g, e.g. \"8g\"",
        );
        let mount_err = |mount: &str, why: &str| {
            assert_err(
                &format!("{base}image = \"i\"\nmounts = [\"/ok:/ok\", \"{mount}\"]\n"),
                7,
                22,
                &format!(
                    "invalid container.mounts[1] \"{mount}\": {why}; write \"src:dst\" or \"src:dst:options\", e.g. \"/data:/data:ro\""
                ),
            )
        };
        mount_err("/data", "expected 2 or 3 parts separated by ':', found 1");
        mount_err("/a:/b:ro:x", "expected 2 or 3 parts separated by ':', found 4");
        mount_err("./data:/data", "the source \"./data\" must be an absolute path or a volume name");
        mount_err(":/data", "the source \"\" must be an absolute path or a volume name");
        mount_err("/data:data", "the destination \"data\" must be an absolute path");
        mount_err(
            "/data:/data:",
            "the options \"\" must be a comma-separated list such as \"ro\" or \"ro,z\"",
        );
        mount_err(
            "/data:/data:r o",
            "the options \"r o\" must be a comma-separated list such as \"ro\" or \"ro,z\"",
        );
        assert_err(
            &format!("{base}image = \"i\"\ngpus = true\n"),
            7,
            1,
            "unknown field `gpus`, expected one of `image`, `runtime`, `args`, `mounts`, `shm_size`",
        );
        assert_err(
            &format!("[[nodes]]\nhost = \"a\"\n{JOB}[env]\nHERD_CONTAINER = \"x\"\n"),
            6,
            1,
            "HERD_CONTAINER is set by herd for every node; remove it from [env]",
        );
    }
}
