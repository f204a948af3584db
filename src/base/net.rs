//! The host on the network: its name, its primary address, socket options.

/// The first non-loopback IPv4 address of an interface that is up.
pub fn primary_ipv4() -> Option<String> {
    let mut addrs: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list that we walk read-only and free with freeifaddrs.
    unsafe {
        if libc::getifaddrs(&mut addrs) != 0 {
            return None;
        }
        let mut found = None;
        let mut cur = addrs;
        while !cur.is_null() {
            let ifa = &*cur;
            let up = ifa.ifa_flags & libc::IFF_UP as u32 != 0;
            let loopback = ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
            if up && !loopback && !ifa.ifa_addr.is_null() && (*ifa.ifa_addr).sa_family as i32 == libc::AF_INET {
                let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                found = Some(std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)).to_string());
                break;
            }
            cur = ifa.ifa_next;
        }
        libc::freeifaddrs(addrs);
        found
    }
}

/// The host name from the kernel.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// Sets `SO_LINGER` on `sock` to `seconds`: 0 makes a close discard unsent data and send a
/// reset; kubelet's probe dialer uses 1.
pub fn set_linger(sock: &impl std::os::fd::AsRawFd, seconds: i32) {
    let linger = libc::linger { l_onoff: 1, l_linger: seconds };
    // SAFETY: setsockopt on a socket the caller owns, with a pointer to a linger struct of
    // that size.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}
