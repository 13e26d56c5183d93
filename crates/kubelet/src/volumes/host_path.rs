//! `hostPath` volumes' `type`, checked as upstream's hostPath plugin
//! checks it (`checkType`): the kind of what the path names, and
//! `DirectoryOrCreate`/`FileOrCreate` making what is missing. Used for
//! inline `hostPath` volumes and `hostPath` PersistentVolumes alike.

use std::path::Path;

/// The kind of what `path` names (following links), in the words of
/// upstream's `GetFileType`.
fn host_file_type(path: &Path) -> Result<&'static str, String> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(path).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::NotFound => "no such file or directory".to_string(),
            _ => e.to_string(),
        };
        format!("stat {}: {why}", path.display())
    })?;
    let t = meta.file_type();
    Ok(if t.is_socket() {
        "Socket"
    } else if t.is_block_device() {
        "BlockDevice"
    } else if t.is_char_device() {
        "CharDevice"
    } else if t.is_dir() {
        "Directory"
    } else if t.is_file() {
        "File"
    } else {
        return Err(
            "only recognise file, directory, socket, block device and character device".into(),
        );
    })
}

/// upstream's hostPath `checkType`: `DirectoryOrCreate` and `FileOrCreate`
/// create what is missing (0755 directories with their parents; an empty
/// 0644 file in an existing directory), then every type but the empty one
/// must match what is there.
pub fn check_host_path_type(path: &Path, type_: &str) -> Result<(), String> {
    let exists = path.exists();
    let create = match type_ {
        "" => return Ok(()),
        "DirectoryOrCreate" if !exists => {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(path)
        }
        "FileOrCreate" if !exists => {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .open(path)
                .map(drop)
        }
        _ => Ok(()),
    };
    create.map_err(|e| format!("creating hostPath {}: {e}", path.display()))?;
    let (want, expected) = match type_ {
        "DirectoryOrCreate" | "Directory" => ("Directory", "directory"),
        "FileOrCreate" | "File" => ("File", "file"),
        "Socket" => ("Socket", "socket file"),
        "CharDevice" => ("CharDevice", "character device"),
        "BlockDevice" => ("BlockDevice", "block device"),
        other => return Err(format!("{other} is an invalid volume type")),
    };
    match host_file_type(path) {
        Ok(t) if t == want => Ok(()),
        Ok(t) => Err(format!(
            "hostPath type check failed: {} is not a {expected}, it's a {t}",
            path.display()
        )),
        Err(e) => Err(format!(
            "hostPath type check failed, {} is not a {expected}, unable to determine its type: {e}",
            path.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_path_types_are_checked_as_upstream() {
        let tmp = std::env::temp_dir().join(format!("rkube-hostpath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        let file = tmp.join("f");
        std::fs::write(&file, b"x").unwrap();
        let sock = tmp.join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let null = Path::new("/dev/null");
        for (path, ty) in [
            (&tmp, ""),
            (&tmp, "Directory"),
            (&tmp, "DirectoryOrCreate"),
            (&file, "File"),
            (&file, "FileOrCreate"),
            (&sock, "Socket"),
        ] {
            assert_eq!(check_host_path_type(path, ty), Ok(()), "{ty}");
        }
        assert_eq!(check_host_path_type(null, "CharDevice"), Ok(()));
        assert_eq!(
            check_host_path_type(&file, "Directory").unwrap_err(),
            format!(
                "hostPath type check failed: {} is not a directory, it's a File",
                file.display()
            )
        );
        assert_eq!(
            check_host_path_type(null, "BlockDevice").unwrap_err(),
            "hostPath type check failed: /dev/null is not a block device, it's a CharDevice"
        );
        let missing = tmp.join("missing");
        assert_eq!(
            check_host_path_type(&missing, "File").unwrap_err(),
            format!(
                "hostPath type check failed, {0} is not a file, unable to determine its type: stat {0}: no such file or directory",
                missing.display()
            )
        );
        assert_eq!(
            check_host_path_type(&missing, "Pipe").unwrap_err(),
            "Pipe is an invalid volume type"
        );
        // The OrCreate types make what is missing, and only that.
        let made = tmp.join("a/b");
        check_host_path_type(&made, "DirectoryOrCreate").unwrap();
        assert!(made.is_dir());
        let new_file = tmp.join("a/new");
        check_host_path_type(&new_file, "FileOrCreate").unwrap();
        assert_eq!(std::fs::read(&new_file).unwrap(), b"");
        assert!(check_host_path_type(&tmp.join("no/parent"), "FileOrCreate").is_err());
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
