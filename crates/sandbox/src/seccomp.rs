//! The seccomp filter: an allow-list by range with a deny-list inside it.
//!
//! Syscalls up to [`REVIEWED_THROUGH`] (the kernel table this list was
//! reviewed against) are allowed unless [`DENIED`] or a conditional rule
//! (sockets, namespace clones, TIOCSTI) refuses them: the program is a full
//! CPython, and naming each of the ~340 calls it may make would break parts
//! of the standard library for no gain, since each was looked at. Every
//! number above it is refused with ENOSYS, as a kernel that predates it
//! would answer (libc falls back where it has a fallback): a syscall a new
//! kernel adds reaches no sandbox until someone has reviewed it and moved
//! the line. The namespaces and Landlock do the confining; seccomp removes
//! the kernel surface a confined process has no business touching.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::SandboxError;

/// The highest syscall number reviewed (the generic table, which x86_64
/// and aarch64 share from 424 on): `landlock_restrict_self`, Linux 5.13.
/// The Landlock calls (444 to 446) stay open: a sandbox's start applies its
/// own rules with them, and a process can only narrow itself with them.
/// `quotactl_fd` (443) is [`DENIED`]. Numbers above (`memfd_secret`,
/// `futex_waitv`, `cachestat`, `fchmodat2`, `map_shadow_stack`,
/// `statmount`, `listmount`, `mseal`, the `*xattrat` calls,
/// `open_tree_attr`, `file_getattr`, `file_setattr`, and whatever comes
/// next) answer ENOSYS.
pub const REVIEWED_THROUGH: u32 = 446;

/// The kernel release whose table ends at [`REVIEWED_THROUGH`], for `doctor`.
pub const REVIEWED_KERNEL: &str = "Linux 5.13";

/// Syscalls refused outright with EPERM.
pub const DENIED: &[(&str, i64)] = &[
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("bpf", libc::SYS_bpf),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("reboot", libc::SYS_reboot),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("acct", libc::SYS_acct),
    ("syslog", libc::SYS_syslog),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("quotactl", libc::SYS_quotactl),
    ("quotactl_fd", libc::SYS_quotactl_fd),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("personality", libc::SYS_personality),
    ("kcmp", libc::SYS_kcmp),
    ("move_pages", libc::SYS_move_pages),
    ("migrate_pages", libc::SYS_migrate_pages),
    #[cfg(target_arch = "x86_64")]
    ("modify_ldt", libc::SYS_modify_ldt),
    #[cfg(target_arch = "x86_64")]
    ("uselib", libc::SYS_uselib),
    #[cfg(target_arch = "x86_64")]
    ("memfd_secret", libc::SYS_memfd_secret),
];

/// Namespace flags that clone() may not carry.
const CLONE_NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

fn arch() -> Result<TargetArch, SandboxError> {
    TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| SandboxError::Seccomp(format!("unsupported architecture: {e}")))
}

fn cond(
    arg: u8,
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, SandboxError> {
    SeccompCondition::new(arg, len, op, value).map_err(|e| SandboxError::Seccomp(e.to_string()))
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, SandboxError> {
    SeccompRule::new(conditions).map_err(|e| SandboxError::Seccomp(e.to_string()))
}

/// What the zygote (see [`crate::zygote`]) may do that sandboxed code may
/// not: make mount, IPC and pid namespaces for its children and mount their
/// private /proc, /tmp and /dev/shm. A new user namespace stays refused.
/// Its children add [`build_zygote_child`] on top before any agent code
/// runs (filters stack: the strictest answer wins).
const ZYGOTE_ALLOWED: &[&str] = &["mount", "umount2", "unshare", "setns"];

/// Builds the two filters: the EPERM deny-list, and clone3 answered with
/// ENOSYS (its flags live in memory seccomp cannot read, so libc must fall
/// back to clone(), whose flags the first filter checks).
pub fn build(allow_inet: bool) -> Result<Vec<BpfProgram>, SandboxError> {
    build_for(allow_inet, false)
}

/// The zygote's filters: [`build`]'s, less [`ZYGOTE_ALLOWED`], with
/// unshare(CLONE_NEWUSER) refused.
pub fn build_zygote(allow_inet: bool) -> Result<Vec<BpfProgram>, SandboxError> {
    build_for(allow_inet, true)
}

/// What a zygote's child adds to the filters it inherits: [`ZYGOTE_ALLOWED`]
/// refused with EPERM. Stacked on [`build_zygote`]'s, that is exactly
/// [`build`]'s policy (a test evaluates both stacks on every syscall), and a
/// child compiles one short program instead of the whole list again.
pub fn build_zygote_child() -> Result<Vec<BpfProgram>, SandboxError> {
    let rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED
        .iter()
        .filter(|(name, _)| ZYGOTE_ALLOWED.contains(name))
        .map(|(_, nr)| (*nr, vec![]))
        .collect();
    let eperm = SeccompAction::Errno(libc::EPERM as u32);
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, eperm, arch()?)
        .and_then(BpfProgram::try_from)
        .map_err(|e| SandboxError::Seccomp(e.to_string()))?;
    Ok(vec![filter])
}

fn build_for(allow_inet: bool, zygote: bool) -> Result<Vec<BpfProgram>, SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (name, nr) in DENIED {
        if !(zygote && ZYGOTE_ALLOWED.contains(name)) {
            rules.insert(*nr, vec![]);
        }
    }
    if zygote {
        let newuser = libc::CLONE_NEWUSER as u64;
        rules.insert(
            libc::SYS_unshare,
            vec![rule(vec![cond(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(newuser),
                newuser,
            )?])?],
        );
    }
    // socket(): only AF_UNIX (and AF_INET/AF_INET6 when the network is on).
    let mut domain_conds = vec![cond(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Ne,
        libc::AF_UNIX as u64,
    )?];
    if allow_inet {
        domain_conds.push(cond(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_INET as u64,
        )?);
        domain_conds.push(cond(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_INET6 as u64,
        )?);
    }
    rules.insert(libc::SYS_socket, vec![rule(domain_conds.clone())?]);
    // socketpair() reaches a family's socket code too: the same rule.
    rules.insert(libc::SYS_socketpair, vec![rule(domain_conds)?]);
    // clone() with any namespace flag.
    let clone_rules = CLONE_NAMESPACE_FLAGS
        .iter()
        .map(|flag| {
            rule(vec![cond(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(*flag),
                *flag,
            )?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    // ioctl(TIOCSTI): pushing characters into a terminal's input.
    rules.insert(
        libc::SYS_ioctl,
        vec![rule(vec![cond(
            1,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            libc::TIOCSTI,
        )?])?],
    );

    let eperm = SeccompAction::Errno(libc::EPERM as u32);
    let deny = SeccompFilter::new(rules, SeccompAction::Allow, eperm, arch()?)
        .map_err(|e| SandboxError::Seccomp(e.to_string()))?;
    let mut clone3 = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, vec![]);
    let enosys = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch()?,
    )
    .map_err(|e| SandboxError::Seccomp(e.to_string()))?;
    // Installed first: on a tie between two ERRNO answers the filter
    // installed last wins, so a listed syscall above the line (memfd_secret)
    // keeps its EPERM.
    let mut programs = vec![newer_than_reviewed()];
    for f in [deny, enosys] {
        programs.push(BpfProgram::try_from(f).map_err(|e| SandboxError::Seccomp(e.to_string()))?);
    }
    #[cfg(target_arch = "x86_64")]
    programs.push(x32_guard());
    Ok(programs)
}

/// Every syscall number above [`REVIEWED_THROUGH`] answers ENOSYS (the x32
/// range too, which [`x32_guard`], installed later, answers EPERM).
fn newer_than_reviewed() -> BpfProgram {
    const JGT_K: u16 = 0x05 | 0x20; // BPF_JMP | BPF_JGT | BPF_K
    number_guard(JGT_K, REVIEWED_THROUGH, libc::ENOSYS)
}

/// On x86_64, syscall numbers with bit 30 set are the x32 ABI: the same
/// kernel functions under other numbers, which a filter keyed on x86_64
/// numbers would let through. Refuse them all (seccompiler checks the
/// architecture field, but not this bit).
#[cfg(target_arch = "x86_64")]
fn x32_guard() -> BpfProgram {
    const JGE_K: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
    number_guard(JGE_K, 0x4000_0000, libc::EPERM)
}

/// A program on the syscall number alone: `errno` where `nr <jump> bound`
/// (`jump` a BPF_JMP comparison with a constant), allowed otherwise.
fn number_guard(jump: u16, bound: u32, errno: i32) -> BpfProgram {
    use seccompiler::sock_filter;
    const LD_W_ABS: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS (0x20)
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    vec![
        // A = seccomp_data.nr (offset 0)
        sock_filter {
            code: LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        // if the comparison holds fall through to the errno, else skip to ALLOW
        sock_filter {
            code: jump,
            jt: 0,
            jf: 1,
            k: bound,
        },
        sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ERRNO | errno as u32,
        },
        sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ALLOW,
        },
    ]
}

/// Installs the filters on the current thread (no_new_privs must be set).
pub fn apply(allow_inet: bool) -> Result<(), SandboxError> {
    install(build(allow_inet)?)
}

/// Installs the zygote's filters (see [`build_zygote`]).
pub fn apply_zygote(allow_inet: bool) -> Result<(), SandboxError> {
    install(build_zygote(allow_inet)?)
}

fn install(programs: Vec<BpfProgram>) -> Result<(), SandboxError> {
    for program in programs {
        seccompiler::apply_filter(&program).map_err(|e| SandboxError::Seccomp(e.to_string()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn filters_compile_for_this_architecture() {
        let programs = super::build(false).map_err(|e| e.to_string());
        let expected = if cfg!(target_arch = "x86_64") { 4 } else { 3 };
        assert_eq!(programs.map(|p| p.len()), Ok(expected));
    }

    #[test]
    fn nothing_above_the_reviewed_table_reaches_the_kernel() {
        let Ok(programs) = super::build(false) else {
            panic!("filters must compile");
        };
        let stack: Vec<&[sock_filter]> = programs.iter().map(Vec::as_slice).collect();
        let allow = 0x7fff_0000;
        let enosys = 0x0005_0000 | libc::ENOSYS as u32;
        let eperm = 0x0005_0000 | libc::EPERM as u32;
        // quotactl_fd, memfd_secret, futex_waitv, fchmodat2, statmount, listmount,
        // mseal, setxattrat, removexattrat, open_tree_attr, file_getattr,
        // file_setattr, and numbers no kernel has yet.
        for nr in [
            443,
            447,
            449,
            452,
            457,
            458,
            462,
            463,
            466,
            467,
            468,
            469,
            470,
            600,
            0x3fff_ffff,
        ] {
            let got = stacked(&stack, &data(nr, [0; 6]));
            assert!(got == enosys || got == eperm, "syscall {nr}: {got:#x}");
        }
        // memfd_secret stays EPERM, as listed.
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            stacked(&stack, &data(libc::SYS_memfd_secret as u32, [0; 6])),
            eperm
        );
        // What CPython lives on is untouched, up to the line itself.
        for nr in [
            libc::SYS_read,
            libc::SYS_openat,
            libc::SYS_mmap,
            libc::SYS_futex,
            libc::SYS_close_range,
            libc::SYS_faccessat2,
            libc::SYS_epoll_pwait2,
            libc::SYS_landlock_create_ruleset,
            libc::SYS_landlock_restrict_self,
        ] {
            assert_eq!(stacked(&stack, &data(nr as u32, [0; 6])), allow, "{nr}");
        }
    }

    use seccompiler::sock_filter;

    /// This machine's AUDIT_ARCH (what the kernel puts in seccomp_data).
    const NATIVE: u32 = if cfg!(target_arch = "x86_64") {
        0xc000_003e // AUDIT_ARCH_X86_64
    } else {
        0xc000_00b7 // AUDIT_ARCH_AARCH64
    };
    /// Another architecture's calls (i386), which every stack must refuse alike.
    const FOREIGN: u32 = 0x4000_0003;

    /// seccomp_data: nr, arch, instruction pointer, then six 64-bit args.
    fn data(nr: u32, args: [u64; 6]) -> Vec<u8> {
        data_for(NATIVE, nr, args)
    }

    fn data_for(arch: u32, nr: u32, args: [u64; 6]) -> Vec<u8> {
        let mut d = Vec::with_capacity(64);
        d.extend_from_slice(&nr.to_ne_bytes());
        d.extend_from_slice(&arch.to_ne_bytes());
        d.extend_from_slice(&0u64.to_ne_bytes());
        for a in args {
            d.extend_from_slice(&a.to_ne_bytes());
        }
        d
    }

    /// A classic-BPF interpreter for what seccompiler emits (and the x32
    /// guard): loads, ALU with constants, jumps, returns.
    fn run(program: &[sock_filter], data: &[u8]) -> u32 {
        let (mut a, mut x, mut mem, mut pc) = (0u32, 0u32, [0u32; 16], 0usize);
        loop {
            let i = &program[pc];
            pc += 1;
            let k = i.k;
            match i.code {
                0x20 => {
                    let at = k as usize;
                    a = u32::from_ne_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
                }
                0x00 => a = k,
                0x01 => x = k,
                0x60 => a = mem[k as usize],
                0x61 => x = mem[k as usize],
                0x02 => mem[k as usize] = a,
                0x03 => mem[k as usize] = x,
                0x54 => a &= k,
                0x44 => a |= k,
                0x04 => a = a.wrapping_add(k),
                0x14 => a = a.wrapping_sub(k),
                0x07 => x = a,
                0x87 => a = x,
                0x05 => pc += k as usize,
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let taken = match i.code {
                        0x15 => a == k,
                        0x25 => a > k,
                        0x35 => a >= k,
                        _ => a & k != 0,
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                0x06 => return k,
                other => panic!("the test interpreter lacks BPF opcode {other:#x}"),
            }
        }
    }

    /// What the kernel answers for a stack of filters: the action of the
    /// highest precedence (the lowest action bits compared as a signed
    /// number, so KILL_PROCESS, 0x80000000, first), the latest filter's on a
    /// tie.
    fn stacked(programs: &[&[sock_filter]], data: &[u8]) -> u32 {
        let action = |r: u32| (r & 0xffff_0000) as i32;
        let mut answer: Option<u32> = None;
        for p in programs {
            let r = run(p, data);
            if answer.is_none_or(|a| action(r) <= action(a)) {
                answer = Some(r);
            }
        }
        answer.unwrap_or(0x7fff_0000)
    }

    #[test]
    fn a_zygote_childs_stack_is_the_cold_policy_on_every_syscall() {
        for network in [false, true] {
            let (Ok(cold), Ok(zygote), Ok(child)) = (
                super::build(network),
                super::build_zygote(network),
                super::build_zygote_child(),
            ) else {
                panic!("filters must compile");
            };
            let cold: Vec<&[sock_filter]> = cold.iter().map(Vec::as_slice).collect();
            let stack: Vec<&[sock_filter]> =
                zygote.iter().chain(&child).map(Vec::as_slice).collect();
            let zygote_only: Vec<&[sock_filter]> = zygote.iter().map(Vec::as_slice).collect();
            // Arguments that reach every conditional rule: namespace flags,
            // socket families, TIOCSTI, and plain values.
            let mut values: Vec<u64> = vec![0, 1, 2, 10, 16, libc::TIOCSTI, u64::MAX];
            values.extend(super::CLONE_NAMESPACE_FLAGS);
            values.push(
                super::CLONE_NAMESPACE_FLAGS
                    .iter()
                    .fold(0, |acc, f| acc | f),
            );
            let mut differ_from_zygote = 0;
            for arch in [NATIVE, FOREIGN] {
                for nr in (0..600u32).chain([0x4000_0000, 0x4000_0001 + 59]) {
                    for &v in &values {
                        let d = data_for(arch, nr, [v, v, 0, 0, 0, 0]);
                        let want = stacked(&cold, &d);
                        assert_eq!(
                            stacked(&stack, &d),
                            want,
                            "network {network}, arch {arch:#x}, syscall {nr}, argument {v:#x}"
                        );
                        differ_from_zygote += usize::from(stacked(&zygote_only, &d) != want);
                    }
                }
            }
            // The zygote alone is weaker (mount, umount2, unshare, setns): the check can fail.
            assert!(differ_from_zygote >= 4, "{differ_from_zygote}");
            // And the cold policy refuses what it must, and other architectures' calls.
            let eperm = 0x0005_0000 | libc::EPERM as u32;
            for nr in [
                libc::SYS_mount,
                libc::SYS_setns,
                libc::SYS_unshare,
                libc::SYS_ptrace,
            ] {
                assert_eq!(stacked(&cold, &data(nr as u32, [0; 6])), eperm, "{nr}");
            }
            assert_ne!(stacked(&cold, &data_for(FOREIGN, 0, [0; 6])), 0x7fff_0000);
        }
    }

    #[test]
    fn the_zygote_filter_is_the_same_list_less_what_it_needs() {
        let (Ok(code), Ok(zygote)) = (super::build(false), super::build_zygote(false)) else {
            panic!("filters must compile");
        };
        assert_eq!(code.len(), zygote.len());
        // The same line for newer syscalls.
        assert_eq!(code[0], zygote[0]);
        // Fewer denied syscalls, one conditional rule added: a shorter program.
        assert!(zygote[1].len() < code[1].len());
        assert_eq!(code[2..], zygote[2..]);
    }
}
