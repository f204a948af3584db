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

/// A non-blocking, close-on-exec TCP socket connecting to `addr`: the connection completes
/// (or fails) later, when the socket turns writable (`TcpStream::take_error` then says
/// which), or as `connect_again` finds.
pub fn connect_nonblocking(addr: &std::net::SocketAddr) -> std::io::Result<std::net::TcpStream> {
    use std::os::fd::FromRawFd;
    let family = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: socket takes plain integers.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just created and is owned by nobody else; the stream closes it.
    let stream = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    match connect_raw(&stream, addr) {
        Err(e) if e.raw_os_error() != Some(libc::EINPROGRESS) => Err(e),
        _ => Ok(stream),
    }
}

/// Whether a connection `connect_nonblocking` started has completed: `Ok(false)` while it is
/// still under way, the reason when it failed. On loopback it has completed when `connect`
/// returned, so a probe needs no wait for it.
pub fn connect_again(stream: &std::net::TcpStream, addr: &std::net::SocketAddr) -> std::io::Result<bool> {
    match connect_raw(stream, addr) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EISCONN) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EALREADY) || e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(false),
        Err(e) => Err(e),
    }
}

fn connect_raw(stream: &std::net::TcpStream, addr: &std::net::SocketAddr) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: all-zero bytes are a valid sockaddr_storage; the address is written into it
    // below as the type its family names, which fits.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        std::net::SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in is smaller than sockaddr_storage and both are plain data.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        std::net::SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: storage holds an address of `len` bytes, as written above.
    let r = unsafe {
        libc::connect(stream.as_raw_fd(), (&storage as *const libc::sockaddr_storage).cast(), len as libc::socklen_t)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
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
