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

/// Whether the peer of a connected TCP socket has closed its side (a FIN or a reset is
/// waiting): a non-blocking peek that reads nothing.
pub fn peer_closed(sock: &impl std::os::fd::AsRawFd) -> bool {
    let mut byte = 0u8;
    // SAFETY: recv into a one-byte buffer we own, with MSG_PEEK (nothing is consumed) and
    // MSG_DONTWAIT (it never blocks).
    let n = unsafe {
        libc::recv(sock.as_raw_fd(), (&mut byte as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT)
    };
    n == 0 || (n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECONNRESET))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn a_peer_that_closed_is_told_from_one_that_did_not_without_blocking() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        assert!(!peer_closed(&client), "the server is still there");
        std::io::Write::write_all(&mut &server, b"x").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!peer_closed(&client), "unread data is not a close, and stays unread");
        drop(server);
        std::thread::sleep(std::time::Duration::from_millis(20));
        // The byte is still first in line: peek sees it, not the FIN behind it.
        assert!(!peer_closed(&client));
        let mut buf = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut &client, &mut buf).unwrap(), 1);
        assert!(peer_closed(&client), "now only the FIN is there");
    }
}
