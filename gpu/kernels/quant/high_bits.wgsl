// The fifth bits of Q5_0 / Q5_1: 16 bits (bit i for value i) spread to bit 4 of byte i of four
// words, ready to OR onto the low nibbles.

// Bit i of the 4-bit b to bit 4 of byte i: b x 0x02040810 is b shifted by 4, 11, 18 and 25 bits, four
// copies that cannot overlap or carry (each is 4 bits wide), and bit i of the copy shifted by 4 + 7 i lands
// on bit 8 i + 4. One multiply and one AND where shifting and masking each bit took about nine instructions.
fn spread4(b: u32) -> u32 {
    return (b * 0x02040810u) & 0x10101010u;
}

fn high_bits16(qh: u32) -> vec4<u32> {
    return vec4<u32>(spread4(qh & 0xFu), spread4((qh >> 4u) & 0xFu), spread4((qh >> 8u) & 0xFu),
                     spread4((qh >> 12u) & 0xFu));
}
