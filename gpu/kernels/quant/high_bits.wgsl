// The fifth bits of Q5_0 / Q5_1: 16 bits (bit i for value i) spread to bit 4 of byte i of four
// words, ready to OR onto the low nibbles.

fn spread4(b: u32) -> u32 {
    return ((b & 1u) | ((b & 2u) << 7u) | ((b & 4u) << 14u) | ((b & 8u) << 21u)) << 4u;
}

fn high_bits16(qh: u32) -> vec4<u32> {
    return vec4<u32>(spread4(qh & 0xFu), spread4((qh >> 4u) & 0xFu), spread4((qh >> 8u) & 0xFu),
                     spread4((qh >> 12u) & 0xFu));
}
