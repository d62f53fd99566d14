"""An independent Philox4x32-10 in plain Python, to check the ops' documented counter layout."""

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK, p1 & MASK, ((p0 >> 32) ^ c3 ^ k1) & MASK, p0 & MASK
        k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
    return c0, c1, c2, c3


def uniform(seed: int, offset: int, row: int, draw: int) -> float:
    seed &= (1 << 64) - 1
    offset &= (1 << 64) - 1
    ctr = (offset & MASK, offset >> 32, row, draw >> 2)
    return philox4x32_10(ctr, (seed & MASK, seed >> 32))[draw & 3] * 2.0 ** -32
