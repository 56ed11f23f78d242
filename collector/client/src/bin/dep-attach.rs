//! `dep-attach PID DYNAMORIO CLIENT DR-OPTIONS CLIENT-OPTIONS`: the helper behind
//! `dep record --attach`. It registers DynamoRIO and the DEP client for process PID
//! (DynamoRIO's per-process config file, which the injected DynamoRIO reads) and injects
//! DynamoRIO into it with ptrace, through DynamoRIO's own injector library (drinjectlib and
//! drconfiglib, static libraries of the dynamorio-sys build). Once DynamoRIO runs in the
//! process it prints `attached` and waits for a line on its input (the launcher sends one
//! when the client has connected, so DynamoRIO has read its options), then removes the
//! config file.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::process::ExitCode;

// The static libraries sit in the tree's lib64, the parent of the lib64/release directory
// dynamorio-sys's build script adds to the linker's search path. (Clippy takes the repeated
// `kind` and `modifiers` of separate libraries for duplicates.)
// SAFETY: the declarations follow dr_inject.h and dr_config.h of the same DynamoRIO build
// (its include/), process_id_t being pid_t, enums int; exercised by tests/attach.rs.
#[allow(clippy::duplicated_attributes)]
#[link(name = "../libdrinjectlib.a", kind = "static", modifiers = "+verbatim")]
#[link(name = "../libdrconfiglib.a", kind = "static", modifiers = "+verbatim")]
#[link(name = "../libdrfrontendlib.a", kind = "static", modifiers = "+verbatim")]
#[link(name = "../libdrdecode.a", kind = "static", modifiers = "+verbatim")]
#[link(name = "../libdrlibc.a", kind = "static", modifiers = "+verbatim")]
unsafe extern "C" {
    fn dr_inject_prepare_to_attach(pid: c_int, app_name: *const c_char, wait_syscall: bool, data: *mut *mut c_void) -> c_int;
    fn dr_inject_process_inject(data: *mut c_void, force: bool, library_path: *const c_char) -> bool;
    fn dr_inject_process_run(data: *mut c_void) -> bool;
    fn dr_inject_get_image_name(data: *mut c_void) -> *const c_char;
    fn dr_register_process(
        name: *const c_char,
        pid: c_int,
        global: bool,
        root: *const c_char,
        mode: c_int,
        debug: bool,
        platform: c_int,
        options: *const c_char,
    ) -> c_int;
    fn dr_unregister_process(name: *const c_char, pid: c_int, global: bool, platform: c_int) -> c_int;
    fn dr_register_client(
        name: *const c_char,
        pid: c_int,
        global: bool,
        platform: c_int,
        id: u32,
        pri: usize,
        path: *const c_char,
        options: *const c_char,
    ) -> c_int;
}

const DR_MODE_CODE_MANIPULATION: c_int = 1;
const DR_PLATFORM_64BIT: c_int = 2;
const DR_SUCCESS: c_int = 0;

fn run(args: &[String]) -> Result<(), String> {
    let [pid, root, client, dr_opts, client_opts] = args else {
        return Err("usage: dep-attach PID DYNAMORIO CLIENT DR-OPTIONS CLIENT-OPTIONS".into());
    };
    let pid: c_int = pid.parse().ok().filter(|&p| p > 0).ok_or_else(|| format!("not a process id: {pid}"))?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map_err(|e| format!("no process {pid}: {e}"))?;
    let c = |s: &str| CString::new(s).map_err(|_| format!("NUL in argument {s:?}"));
    let exe_c = c(&exe.to_string_lossy())?;
    let root_c = c(root)?;
    let lib = c(&format!("{root}/lib64/release/libdynamorio.so"))?;
    let (client_c, dr_opts_c, client_opts_c) = (c(client)?, c(dr_opts)?, c(client_opts)?);
    let mut data = std::ptr::null_mut();
    // SAFETY: the strings are NUL-terminated and outlive the calls; `data` is the
    // injector's own handle, passed back only to its functions.
    unsafe {
        if dr_inject_prepare_to_attach(pid, exe_c.as_ptr(), false, &mut data) != 0 || data.is_null() {
            return Err(format!("cannot attach to process {pid} (ptrace: check permissions)"));
        }
        let name = CStr::from_ptr(dr_inject_get_image_name(data)).to_owned();
        dr_unregister_process(name.as_ptr(), pid, false, DR_PLATFORM_64BIT);
        let st = dr_register_process(
            name.as_ptr(),
            pid,
            false,
            root_c.as_ptr(),
            DR_MODE_CODE_MANIPULATION,
            false,
            DR_PLATFORM_64BIT,
            dr_opts_c.as_ptr(),
        );
        if st != DR_SUCCESS {
            return Err(format!("cannot write DynamoRIO's config for process {pid} (status {st})"));
        }
        let st = dr_register_client(name.as_ptr(), pid, false, DR_PLATFORM_64BIT, 0, 0, client_c.as_ptr(), client_opts_c.as_ptr());
        if st != DR_SUCCESS {
            dr_unregister_process(name.as_ptr(), pid, false, DR_PLATFORM_64BIT);
            return Err(format!("cannot register the client for process {pid} (status {st})"));
        }
        if !dr_inject_process_inject(data, false, lib.as_ptr()) || !dr_inject_process_run(data) {
            dr_unregister_process(name.as_ptr(), pid, false, DR_PLATFORM_64BIT);
            return Err(format!("cannot inject DynamoRIO into process {pid} (ptrace: check permissions)"));
        }
        println!("attached");
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        dr_unregister_process(name.as_ptr(), pid, false, DR_PLATFORM_64BIT);
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dep-attach: {e}");
            ExitCode::FAILURE
        }
    }
}
