//! A profile's family: the profiles of the processes its program forked or exec'd, written
//! beside it as PROFILE.1, PROFILE.2, ... in the order the collector saw them start.

use super::{Profile, ProfileError};
use std::path::{Path, PathBuf};

/// The paths of `profile` and of its family's profiles that exist (PROFILE.1, ... up to the
/// first number missing).
pub fn family_paths(profile: &Path) -> Vec<PathBuf> {
    let mut all = vec![profile.to_path_buf()];
    for n in 1.. {
        let p = PathBuf::from(format!("{}.{n}", profile.display()));
        if !p.exists() {
            break;
        }
        all.push(p);
    }
    all
}

/// Opens `profile` and its family. A profile whose parent is not one of the processes
/// before it (a file left from another run) is left out; its path is in the second list.
pub fn open_family(profile: &Path) -> Result<(Vec<Profile>, Vec<PathBuf>), ProfileError> {
    let (mut profiles, mut strays): (Vec<Profile>, Vec<PathBuf>) = (Vec::new(), Vec::new());
    for p in family_paths(profile) {
        let child = Profile::open(&p)?;
        if !profiles.is_empty() && !child.meta.parent.as_ref().is_some_and(|l| profiles.iter().any(|q| q.meta.pid == l.parent_pid)) {
            strays.push(p);
            continue;
        }
        profiles.push(child);
    }
    Ok((profiles, strays))
}
