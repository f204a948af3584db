//! SPDY/3 header-block compression: one zlib stream per direction per session, primed with
//! the SPDY/3 dictionary, each header block ended by a sync flush (draft 3, section 2.6.10.1).
//!
//! Inflating uses miniz_oxide's core with a 32 KiB wrapping window that starts out holding the
//! dictionary, so back-references into it resolve as zlib's `inflateSetDictionary` makes them.
//! Deflating writes stored (uncompressed) blocks: header blocks are small, every zlib reader
//! accepts them, and no state is kept between blocks beyond "the zlib header was sent".

use super::SpdyError;
use miniz_oxide::inflate::core::{decompress, inflate_flags, DecompressorOxide};
use miniz_oxide::inflate::TINFLStatus;

/// The SPDY/3 header dictionary (1423 bytes, no trailing NUL): Chromium's `kV3Dictionary`,
/// spdystream's `headerDictionary`.
pub const DICTIONARY: &[u8] = b"\
    \x00\x00\x00\x07options\x00\x00\x00\x04head\x00\x00\x00\x04post\x00\x00\x00\x03put\
    \x00\x00\x00\x06delete\x00\x00\x00\x05trace\x00\x00\x00\x06accept\
    \x00\x00\x00\x0eaccept-charset\x00\x00\x00\x0faccept-encoding\
    \x00\x00\x00\x0faccept-language\x00\x00\x00\x0daccept-ranges\x00\x00\x00\x03age\
    \x00\x00\x00\x05allow\x00\x00\x00\x0dauthorization\x00\x00\x00\x0dcache-control\
    \x00\x00\x00\x0aconnection\x00\x00\x00\x0ccontent-base\
    \x00\x00\x00\x10content-encoding\x00\x00\x00\x10content-language\
    \x00\x00\x00\x0econtent-length\x00\x00\x00\x10content-location\
    \x00\x00\x00\x0bcontent-md5\x00\x00\x00\x0dcontent-range\x00\x00\x00\x0ccontent-type\
    \x00\x00\x00\x04date\x00\x00\x00\x04etag\x00\x00\x00\x06expect\
    \x00\x00\x00\x07expires\x00\x00\x00\x04from\x00\x00\x00\x04host\
    \x00\x00\x00\x08if-match\x00\x00\x00\x11if-modified-since\
    \x00\x00\x00\x0dif-none-match\x00\x00\x00\x08if-range\
    \x00\x00\x00\x13if-unmodified-since\x00\x00\x00\x0dlast-modified\
    \x00\x00\x00\x08location\x00\x00\x00\x0cmax-forwards\x00\x00\x00\x06pragma\
    \x00\x00\x00\x12proxy-authenticate\x00\x00\x00\x13proxy-authorization\
    \x00\x00\x00\x05range\x00\x00\x00\x07referer\x00\x00\x00\x0bretry-after\
    \x00\x00\x00\x06server\x00\x00\x00\x02te\x00\x00\x00\x07trailer\
    \x00\x00\x00\x11transfer-encoding\x00\x00\x00\x07upgrade\x00\x00\x00\x0auser-agent\
    \x00\x00\x00\x04vary\x00\x00\x00\x03via\x00\x00\x00\x07warning\
    \x00\x00\x00\x10www-authenticate\x00\x00\x00\x06method\x00\x00\x00\x03get\
    \x00\x00\x00\x06status\x00\x00\x00\x06200 OK\x00\x00\x00\x07version\
    \x00\x00\x00\x08HTTP/1.1\x00\x00\x00\x03url\x00\x00\x00\x06public\
    \x00\x00\x00\x0aset-cookie\x00\x00\x00\x0akeep-alive\x00\x00\x00\x06origin\
    100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505\
    203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request\
    401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented\
    503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 \
    Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,\
    application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=\
    gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.";

/// The dictionary's Adler-32, the DICTID a zlib header with FDICT carries.
pub const DICTIONARY_ID: u32 = 0xE3C6_A7C2;

/// The deflate window: the longest back-reference is 32 KiB, and miniz_oxide needs a power of two.
const WINDOW: usize = 32 * 1024;

/// The zlib header this side sends: deflate, 32 KiB window, FDICT, FLEVEL 3 (`78 f9`), then the
/// DICTID, as Go's `zlib.NewWriterLevelDict(…, BestCompression, dict)` writes it.
const ZLIB_HEADER: [u8; 6] = [0x78, 0xf9, 0xe3, 0xc6, 0xa7, 0xc2];

/// The longest stored deflate block.
const MAX_STORED: usize = u16::MAX as usize;

/// FDICT in a zlib header's second byte.
const FDICT: u8 = 0x20;

/// Inflates the header blocks of one direction of one session, in order.
pub(super) struct HeaderInflater {
    state: Box<DecompressorOxide>,
    window: Box<[u8]>,
    /// Where the next inflated byte goes in `window`.
    pos: usize,
    /// The zlib header's bytes seen so far (it may in theory span header blocks).
    header: [u8; 6],
    header_len: usize,
    /// Whether the whole zlib header (with its DICTID if any) has been read.
    header_done: bool,
    /// The peer ended its deflate stream, or a block failed: nothing more can be inflated.
    finished: bool,
}

impl HeaderInflater {
    /// An inflater whose window holds the dictionary, before the zlib header.
    pub(super) fn new() -> Self {
        let mut window = vec![0u8; WINDOW].into_boxed_slice();
        window[..DICTIONARY.len()].copy_from_slice(DICTIONARY);
        HeaderInflater {
            state: Box::default(),
            window,
            pos: DICTIONARY.len(),
            header: [0; 6],
            header_len: 0,
            header_done: false,
            finished: false,
        }
    }

    /// Inflates one header block's compressed bytes (all of them: a sync flush ends each
    /// block), at most `max` bytes out. After an error the stream is unusable, so every
    /// later call fails too.
    pub(super) fn inflate(&mut self, input: &[u8], max: usize) -> Result<Vec<u8>, SpdyError> {
        if self.finished {
            return Err(SpdyError::HeaderStreamEnded);
        }
        let result = self.inflate_inner(input, max);
        if result.is_err() {
            self.finished = true;
        }
        result
    }

    fn inflate_inner(&mut self, input: &[u8], max: usize) -> Result<Vec<u8>, SpdyError> {
        let mut input = self.read_header(input)?;
        let mut out = Vec::new();
        // Output can be pending at the window's edge with every input byte taken.
        let mut pending = false;
        while pending || !input.is_empty() {
            let (status, used, written) = decompress(
                &mut self.state,
                input,
                &mut self.window,
                self.pos,
                inflate_flags::TINFL_FLAG_HAS_MORE_INPUT,
            );
            input = &input[used..];
            if out.len() + written > max {
                return Err(SpdyError::HeaderBlockTooLarge { max });
            }
            out.extend_from_slice(&self.window[self.pos..self.pos + written]);
            self.pos = (self.pos + written) % WINDOW;
            pending = false;
            match status {
                // All input taken: the loop ends.
                TINFLStatus::NeedsMoreInput => {}
                // The window's end was reached: go on from its start.
                TINFLStatus::HasMoreOutput => pending = true,
                // A final block: Go never sends one, and nothing can follow it.
                TINFLStatus::Done => {
                    self.finished = true;
                    if !input.is_empty() {
                        return Err(SpdyError::HeaderStreamEnded);
                    }
                    break;
                }
                status => return Err(SpdyError::Inflate { status }),
            }
            if used == 0 && written == 0 && (pending || !input.is_empty()) {
                // A call that neither takes input nor writes yet has more to do cannot
                // happen (the window always has room after a wrap); a guard against looping.
                return Err(SpdyError::Inflate { status });
            }
        }
        Ok(out)
    }

    /// Takes the zlib header (and DICTID) off the front of the stream; the rest of `input`.
    fn read_header<'a>(&mut self, mut input: &'a [u8]) -> Result<&'a [u8], SpdyError> {
        while !self.header_done && !input.is_empty() {
            self.header[self.header_len] = input[0];
            self.header_len += 1;
            input = &input[1..];
            if self.header_len == 2 {
                let (cmf, flg) = (self.header[0], self.header[1]);
                // Deflate with at most a 32 KiB window, and the check bits right (RFC 1950).
                if cmf & 0x0f != 8 || cmf >> 4 > 7 || (u16::from(cmf) << 8 | u16::from(flg)) % 31 != 0 {
                    return Err(SpdyError::BadZlibHeader { cmf, flg });
                }
                // Without FDICT the stream claims no dictionary: the window's copy is unused.
                self.header_done = flg & FDICT == 0;
            } else if self.header_len == 6 {
                let id = u32::from_be_bytes([self.header[2], self.header[3], self.header[4], self.header[5]]);
                if id != DICTIONARY_ID {
                    return Err(SpdyError::WrongDictionary { id });
                }
                self.header_done = true;
            }
        }
        Ok(input)
    }
}

/// Deflates the header blocks of one direction of one session, as stored blocks.
pub(super) struct HeaderDeflater {
    /// Whether the zlib header went out (with the first block).
    started: bool,
}

impl HeaderDeflater {
    /// A deflater that has sent nothing.
    pub(super) fn new() -> Self {
        HeaderDeflater { started: false }
    }

    /// How many bytes `deflate` writes for a block of `len` bytes.
    pub(super) fn deflated_len(&self, len: usize) -> usize {
        let header = if self.started { 0 } else { ZLIB_HEADER.len() };
        header + len.div_ceil(MAX_STORED) * 5 + len + SYNC_FLUSH.len()
    }

    /// Appends `block` to `out` as non-final stored blocks, after the zlib header the first
    /// time, and ends it with an empty stored block, as a sync flush does. Go's inflater
    /// hands out a stored block's bytes only when it reads the block after it: without the
    /// empty one it would read past the frame, fail, and keep failing for every later block.
    pub(super) fn deflate(&mut self, block: &[u8], out: &mut Vec<u8>) {
        if !self.started {
            out.extend_from_slice(&ZLIB_HEADER);
            self.started = true;
        }
        for chunk in block.chunks(MAX_STORED) {
            // BFINAL 0, BTYPE 00, then LEN and NLEN (little-endian, RFC 1951 3.2.4).
            let len = chunk.len() as u16; // chunks of at most u16::MAX bytes
            out.push(0);
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&(!len).to_le_bytes());
            out.extend_from_slice(chunk);
        }
        out.extend_from_slice(&SYNC_FLUSH);
    }
}

/// An empty non-final stored block: how a sync flush ends.
const SYNC_FLUSH: [u8; 5] = [0, 0, 0, 0xff, 0xff];

#[cfg(test)]
mod tests {
    use super::*;

    fn adler32(data: &[u8]) -> u32 {
        let (mut a, mut b) = (1u32, 0u32);
        for &byte in data {
            a = (a + u32::from(byte)) % 65521;
            b = (b + a) % 65521;
        }
        b << 16 | a
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn dictionary_is_spdy3s_with_its_adler32() {
        assert_eq!(DICTIONARY.len(), 1423);
        assert_eq!(adler32(DICTIONARY), DICTIONARY_ID);
        assert_eq!(adler32(DICTIONARY), 0xE3C6_A7C2);
        assert!(DICTIONARY.starts_with(b"\x00\x00\x00\x07options\x00\x00\x00\x04head"));
        assert!(DICTIONARY.ends_with(b",*,enq=0."));
    }

    #[test]
    fn inflates_pythons_first_block_with_dictionary_references() {
        // python3 zlib.compressobj(9, DEFLATED, 15, 9, zdict=DICTIONARY), a header block of
        // {streamtype: error}, flush(Z_SYNC_FLUSH): the same bytes as the research note's vector.
        let mut inflater = HeaderInflater::new();
        let block =
            inflater.inflate(&hex("78f9e3c6a7c202a62346703a2b294a4dcc851625aca9a08006000000ffff"), 1024).unwrap();
        assert_eq!(block, b"\x00\x00\x00\x01\x00\x00\x00\x0astreamtype\x00\x00\x00\x05error");
    }

    #[test]
    fn empty_blocks_from_the_note_inflate_to_a_zero_count() {
        let mut inflater = HeaderInflater::new();
        assert_eq!(inflater.inflate(&hex("78f9e3c6a7c202a6230600000000ffff"), 64).unwrap(), [0; 4]);
        assert_eq!(inflater.inflate(&hex("020100000000ffff"), 64).unwrap(), [0; 4]);
    }

    #[test]
    fn zlib_header_may_arrive_in_pieces() {
        let stream = hex("78f9e3c6a7c202a6230600000000ffff");
        let mut inflater = HeaderInflater::new();
        assert_eq!(inflater.inflate(&stream[..1], 64).unwrap(), b"");
        assert_eq!(inflater.inflate(&stream[1..4], 64).unwrap(), b"");
        assert_eq!(inflater.inflate(&stream[4..], 64).unwrap(), [0; 4]);
    }

    #[test]
    fn wrong_dictionary_id_and_bad_header_are_refused_and_stick() {
        let mut inflater = HeaderInflater::new();
        let err = inflater.inflate(&hex("78f9000000010000"), 64).unwrap_err();
        assert!(matches!(err, SpdyError::WrongDictionary { id: 1 }), "{err}");
        assert!(matches!(inflater.inflate(b"", 64), Err(SpdyError::HeaderStreamEnded)));

        let err = HeaderInflater::new().inflate(&hex("78fa"), 64).unwrap_err();
        assert!(matches!(err, SpdyError::BadZlibHeader { cmf: 0x78, flg: 0xfa }), "{err}");
        let err = HeaderInflater::new().inflate(&hex("0801"), 64).unwrap_err();
        assert!(matches!(err, SpdyError::BadZlibHeader { .. }), "{err}");
    }

    #[test]
    fn inflated_size_is_bounded() {
        let mut deflater = HeaderDeflater::new();
        let mut stream = Vec::new();
        deflater.deflate(&[7u8; 100], &mut stream);
        let err = HeaderInflater::new().inflate(&stream, 99).unwrap_err();
        assert!(matches!(err, SpdyError::HeaderBlockTooLarge { max: 99 }), "{err}");
        assert_eq!(HeaderInflater::new().inflate(&stream, 100).unwrap(), [7u8; 100]);
    }

    #[test]
    fn a_final_block_ends_the_stream() {
        // 78 01, a final stored block of "ab", then the Adler-32 trailer: Go never ends its
        // stream, and nothing can follow the end.
        let mut inflater = HeaderInflater::new();
        assert_eq!(inflater.inflate(&hex("7801010200fdff6162"), 64).unwrap(), b"ab");
        assert!(matches!(inflater.inflate(&hex("012600c4"), 64), Err(SpdyError::HeaderStreamEnded)));
    }

    /// A raw deflate stream (sync-flushed, not final) of `data` from miniz_oxide's compressor.
    fn deflate_sync(data: &[u8]) -> Vec<u8> {
        use miniz_oxide::deflate::core::{compress_to_output, create_comp_flags_from_zip_params};
        use miniz_oxide::deflate::core::{CompressorOxide, TDEFLFlush};
        let mut compressor = CompressorOxide::new(create_comp_flags_from_zip_params(9, -15, 0));
        let mut out = Vec::new();
        compress_to_output(&mut compressor, data, TDEFLFlush::Sync, |chunk| {
            out.extend_from_slice(chunk);
            true
        });
        out
    }

    #[test]
    fn blocks_whose_matches_cross_the_window_edge_inflate_whole() {
        // Long matches end each block; place the window's edge at every point near them.
        let data: Vec<u8> = b"streamtype".iter().copied().cycle().take(3000).collect();
        let compressed = deflate_sync(&data);
        for before_edge in 0..1200 {
            let mut inflater = HeaderInflater::new();
            let mut stored = Vec::new();
            HeaderDeflater::new().deflate(&vec![0u8; WINDOW - DICTIONARY.len() - before_edge], &mut stored);
            inflater.inflate(&stored, 1 << 20).unwrap();
            assert_eq!(inflater.inflate(&compressed, 1 << 20).unwrap(), data, "{before_edge} bytes before the edge");
        }
        // The same ended by a final block instead of a sync flush: its last bytes can all be
        // taken in when the window's edge is reached.
        let unflushed = miniz_oxide::deflate::compress_to_vec(&data, 9);
        for before_edge in 0..1200 {
            let mut inflater = HeaderInflater::new();
            let mut stored = Vec::new();
            HeaderDeflater::new().deflate(&vec![0u8; WINDOW - DICTIONARY.len() - before_edge], &mut stored);
            inflater.inflate(&stored, 1 << 20).unwrap();
            assert_eq!(inflater.inflate(&unflushed, 1 << 20).unwrap(), data, "{before_edge} bytes before the edge");
        }
    }

    #[test]
    fn stored_blocks_round_trip_across_many_blocks_and_the_window_edge() {
        let mut deflater = HeaderDeflater::new();
        let mut inflater = HeaderInflater::new();
        for i in 0..40u32 {
            let block: Vec<u8> = (0..(1000 + i * 997)).map(|n| (n * 31 + i) as u8).collect();
            let mut stream = Vec::new();
            let expected = deflater.deflated_len(block.len());
            deflater.deflate(&block, &mut stream);
            assert_eq!(stream.len(), expected);
            assert_eq!(inflater.inflate(&stream, 1 << 20).unwrap(), block, "block {i}");
        }
        // Longer than one stored block can hold.
        let block = vec![b'x'; 70_000];
        let mut stream = Vec::new();
        deflater.deflate(&block, &mut stream);
        assert_eq!(stream.len(), 70_000 + 10 + SYNC_FLUSH.len());
        assert_eq!(inflater.inflate(&stream, 1 << 20).unwrap(), block);
    }
}
