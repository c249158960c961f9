"""Per-element bounds of a detection loss's operations (box encoding, cross-entropy, smooth L1, the sum over
selected candidates) and of the loss's own backward, the gradients of the network's outputs. Arguments are float64 tensors: oracle values and measured side deviations (d*).
Own-rounding terms carry a factor 2: a correct port may write each formula with its few operations in another
order."""

import torch

from .rounding import ULPS, gamma, u

BOX_WEIGHTS = (10.0, 10.0, 5.0, 5.0)  # torchvision's BoxCoder, as SSD uses it
FORMULA = 2.0


def encode(boxes, anchors, danchors):
    """boxes, anchors, danchors (M,4) xyxy: each positive anchor's matched ground truth (exact: float32 data), the
    anchor and its deviation -> (M,4) bound on the encoded target (cx, cy, w, h), torchvision's encode_boxes:
    wx*(g_cx - p_cx)/p_w, ww*log(g_w/p_w)."""
    out = torch.empty_like(boxes)
    for axis in (0, 1):
        p1, p2, g1, g2 = anchors[:, axis], anchors[:, axis + 2], boxes[:, axis], boxes[:, axis + 2]
        dp = danchors[:, axis] + danchors[:, axis + 2]
        pw, gw = p2 - p1, g2 - g1
        pc, gc = p1 + 0.5 * pw, g1 + 0.5 * gw
        e_pw = u() * pw.abs() + dp
        e_pc = u() * (pc.abs() + p1.abs()) + dp
        e_gw = u() * gw.abs()
        e_gc = u() * (gc.abs() + g1.abs()) + 0.5 * e_gw
        wc, ws = BOX_WEIGHTS[axis], BOX_WEIGHTS[axis + 2]
        centre = wc * (gc - pc) / pw
        e_centre = wc * (e_gc + e_pc + u() * (gc - pc).abs()) / pw + centre.abs() * (2 * u() + e_pw / pw)
        ratio = torch.log(gw / pw)
        e_size = ws * (e_gw / gw + e_pw / pw + u() + ULPS * u() * ratio.abs()) + u() * ws * ratio.abs()
        out[:, axis], out[:, axis + 2] = FORMULA * e_centre, FORMULA * e_size
    return out * (1 + 1e-6)  # second-order terms (products of two roundings)


def _softmax_parts(z):
    """z (..., K) -> (m, p, log s, |z - m| weighted by p): the pieces of log-sum-exp."""
    m = z.max(dim=-1, keepdim=True).values
    p = torch.softmax(z, dim=-1)
    log_s = torch.log(torch.exp(z - m).sum(dim=-1, keepdim=True))
    spread = (p * (z - m).abs()).sum(dim=-1, keepdim=True)
    return m, p, log_s, spread


def _log_sum_exp_error(z, m, log_s, spread):
    """Absolute rounding error of log(sum exp(z - m)) + m - z_k, before the final subtraction: the sum of K
    exponentials (each within |z_k - m| u of its argument's rounding and ULPS ulps of its own), then the log."""
    return gamma(z.shape[-1]) + ULPS * u() + u() * spread + ULPS * u() * log_s + u() * m.abs()


def cross_entropy(z, dz, labels, loss):
    """z, dz (B,P,K) class logits, labels (B,P), loss (B,P) the oracle's -> (B,P).

    loss = m + log sum exp(z - m) - z_y. Own: the log-sum-exp's rounding and the subtractions; propagated: its
    gradient is p - onehot(y), so |d loss| <= sum_k |p_k - onehot_k| dz_k, plus max(dz)^2 (the Hessian of log-sum-exp
    is at most 1 in the max norm)."""
    m, p, log_s, spread = _softmax_parts(z)
    zy = z.gather(-1, labels.unsqueeze(-1))
    own = _log_sum_exp_error(z, m, log_s, spread) + u() * ((zy - m).abs() + loss.unsqueeze(-1).abs())
    onehot = torch.zeros_like(p).scatter_(-1, labels.unsqueeze(-1), 1.0)
    top = dz.max(dim=-1, keepdim=True).values
    propagated = ((p - onehot).abs() * dz).sum(dim=-1, keepdim=True) + top * top
    return (FORMULA * own + propagated).squeeze(-1)


def conf_gradient(z, dz, labels, weight):
    """z, dz (B,P,K), labels (B,P), weight (B,P) d loss / d cross-entropy (count of selections / N) -> (B,P,K).

    grad = weight * (softmax(z) - onehot(y)), the softmax taken as exp(log_softmax). Own: exp of a log-softmax
    within the log-sum-exp's error; propagated: d softmax_k = p_k (dz_k - sum_j p_j dz_j) to first order."""
    m, p, log_s, spread = _softmax_parts(z)
    log_softmax_error = _log_sum_exp_error(z, m, log_s, spread) + u() * (z - m).abs()
    onehot = torch.zeros_like(p).scatter_(-1, labels.unsqueeze(-1), 1.0)
    w = weight.unsqueeze(-1)
    own = w * (p * (log_softmax_error + ULPS * u()) + 2 * u() * (p - onehot).abs())
    top = dz.max(dim=-1, keepdim=True).values
    propagated = w * p * (dz + (p * dz).sum(dim=-1, keepdim=True) + 4 * top * top)
    return FORMULA * own + propagated


def smooth_l1_sum(loc, dloc, target, dtarget, positive, normalizer, loss):
    """loc, dloc, target, dtarget (B,P,4), positive (B,P) bool -> bound on the box loss = sum over positives of
    smooth_l1(loc - target) / normalizer (beta 1), given the oracle's loss (a 0-d tensor)."""
    mask = positive.unsqueeze(-1).to(loc.dtype)
    r = (loc - target).abs()
    terms = torch.where(r < 1, 0.5 * r * r, r - 0.5) * mask
    slope = r.clamp(max=1)
    n = int(positive.sum()) * 4 + positive.shape[0]
    own = (u() * r * slope + 3 * u() * (terms + 0.5 * mask)).sum() + gamma(n) * terms.sum()
    dr = dloc + dtarget
    propagated = (dr * (r + dr).clamp(max=1) * mask).sum()
    return (FORMULA * own + propagated) / normalizer + FORMULA * u() * loss.abs()


def loc_gradient(loc, dloc, target, dtarget, positive, normalizer):
    """-> (B,P,4) bound on d loss / d loc (the box regression) = clamp(loc - target, -1, 1) / normalizer at positives."""
    mask = positive.unsqueeze(-1).to(loc.dtype)
    grad = (loc - target).clamp(-1, 1) * mask / normalizer
    return FORMULA * 3 * u() * grad.abs() + (dloc + dtarget) * mask / normalizer


def selected_sum(cls, dcls, weight, cls_bound_extra, loss):
    """cls, dcls (B,P), weight (B,P) how many times each loss is summed (positives and mined negatives, 0-2),
    cls_bound_extra (B,P): what a candidate selected on one side only adds -> bound on the class loss = selected sum / N
    (weight already divided by N), given the oracle's loss."""
    n = int((weight > 0).sum()) + 1
    own = gamma(n) * (weight * cls.abs()).sum() + FORMULA * u() * loss.abs()
    return own + (weight * dcls).sum() + cls_bound_extra.sum()
