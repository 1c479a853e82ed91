//! Bytes on disk of a directory as `du` counts them: the blocks allocated to every file below
//! it (`st_blocks * 512` on Unix), not file lengths. The two differ for fjall's journal, created
//! as a 64 MiB sparse file whatever it holds, and for every small file (a whole block each).

use std::path::Path;

/// Allocated bytes of one file or directory entry.
fn allocated(meta: &std::fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        meta.blocks().saturating_mul(512)
    }
    #[cfg(not(unix))]
    {
        meta.len()
    }
}

/// Allocated bytes of one file.
///
/// # Errors
/// I/O errors reading its metadata.
pub fn file_bytes(path: &Path) -> std::io::Result<u64> {
    Ok(allocated(&std::fs::metadata(path)?))
}

/// Allocated bytes of everything under `dir` (directories included, symbolic links not
/// followed), as `du -s --block-size=1` reports. Entries vanishing during the walk (fjall deletes
/// tables after compactions) are skipped.
///
/// # Errors
/// I/O errors reading `dir` itself.
pub fn du_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = allocated(&std::fs::symlink_metadata(dir)?);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            total = total.saturating_add(allocated(&meta));
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_files_count_what_is_allocated() {
        let dir = tempfile::tempdir().unwrap();
        let empty = du_bytes(dir.path()).unwrap();
        let sparse = std::fs::File::create(dir.path().join("sparse")).unwrap();
        sparse.set_len(64 << 20).unwrap();
        std::fs::write(dir.path().join("data"), vec![7u8; 100_000]).unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("more"), vec![1u8; 10_000]).unwrap();
        let total = du_bytes(dir.path()).unwrap() - empty;
        // 110,000 bytes of data in whole blocks, the sparse file's 64 MiB not counted.
        assert!((110_000..1 << 20).contains(&total), "{total}");
    }
}
