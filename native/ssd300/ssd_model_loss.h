// Model<T>::loss: torchvision's SSD.compute_loss on the recorded head outputs, in four stages that each read
// taps and record taps, so that any one of them can also be replayed alone on the reference's inputs.
#pragma once

namespace ssd {

// boxes, labels, priors -> match.matched_idx (B,P), match.labels (B,P), targets.loc (B,P,4)
template <typename T>
void Model<T>::match_stage(const std::vector<Tensor<T>>& boxes, const std::vector<std::vector<int64_t>>& labels) {
  const Tensor<T>& priors = taps_.at("priors");
  const int B = int(boxes.size());
  const int64_t P = priors.dim(0);
  Tensor<int64_t> matched({B, P}, -1), cls_target({B, P});
  Tensor<T> target_loc({B, P, 4});
  std::vector<T> iou;
  for (int b = 0; b < B; ++b) {
    const int M = int(boxes[b].dim(0));
    int64_t* match = matched.ptr() + b * P;
    if (M > 0) {  // an image without boxes is all background, as in torchvision's SSD.forward
      iou.resize(size_t(M) * P);
      box_iou(iou.data(), boxes[b].ptr(), priors.ptr(), M, P);
      ssd_match(match, iou.data(), M, P);
    }
    for (int64_t p = 0; p < P; ++p) {
      const int64_t i = b * P + p;
      cls_target.ptr()[i] = match[p] >= 0 ? labels[b][match[p]] : 0;
      if (match[p] >= 0) encode_box(target_loc.ptr() + 4 * i, boxes[b].ptr() + 4 * match[p], priors.ptr() + 4 * p);
    }
  }
  record_index("match.matched_idx", std::move(matched));
  record_index("match.labels", std::move(cls_target));
  record("targets.loc", std::move(target_loc));
}

// conf_head (B,P,K), match.labels (B,P) -> loss.cls_per_prior (B,P)
template <typename T>
void Model<T>::class_loss_stage() {
  const Tensor<T>& conf = taps_.at("conf_head");
  const Tensor<int64_t>& cls_target = index_taps_.at("match.labels");
  const int K = num_classes_;
  Tensor<T> cls_loss(cls_target.shape);
  for (int64_t i = 0; i < cls_loss.numel(); ++i) cls_loss.ptr()[i] = cross_entropy(conf.ptr() + i * K, K, cls_target.ptr()[i]);
  record("loss.cls_per_prior", std::move(cls_loss));
}

// loss.cls_per_prior (B,P), match.labels (B,P) -> mining.negatives (B,P), ranked per image
template <typename T>
void Model<T>::mining_stage() {
  const Tensor<T>& cls_loss = taps_.at("loss.cls_per_prior");
  const Tensor<int64_t>& cls_target = index_taps_.at("match.labels");
  const int64_t B = cls_loss.dim(0), P = cls_loss.dim(1);
  Tensor<int64_t> negatives({B, P});
  std::vector<uint8_t> foreground(P), mined(P);
  if (fault_on(Fault::BatchWideMining)) {  // the bug: one ranking over all B*P priors, 3 x the batch's positives
    std::vector<uint8_t> all_foreground(B * P), all_mined(B * P);
    for (int64_t i = 0; i < B * P; ++i) all_foreground[i] = cls_target.ptr()[i] > 0;
    mine_hard_negatives(all_mined.data(), cls_loss.ptr(), all_foreground.data(), B * P);
    for (int64_t i = 0; i < B * P; ++i) negatives.ptr()[i] = all_mined[i];
    record_index("mining.negatives", std::move(negatives));
    return;
  }
  for (int64_t b = 0; b < B; ++b) {
    // Mining and the classification sum use label > 0, not matched >= 0 (a GT labelled 0 is background here).
    for (int64_t p = 0; p < P; ++p) foreground[p] = cls_target.ptr()[b * P + p] > 0;
    mine_hard_negatives(mined.data(), cls_loss.ptr() + b * P, foreground.data(), P);
    for (int64_t p = 0; p < P; ++p) negatives.ptr()[b * P + p] = mined[p];
  }
  record_index("mining.negatives", std::move(negatives));
}

// torchvision's normalizer N: the number of matched priors in the batch (at least 1)
template <typename T>
T Model<T>::loss_normalizer() const {
  const Tensor<int64_t>& matched = index_taps_.at("match.matched_idx");
  // The FirstImageNormalizer fault: only the first image's matched priors are counted.
  const auto end = fault_on(Fault::FirstImageNormalizer) ? matched.data.begin() + matched.dim(1) : matched.data.end();
  return T(std::max<int64_t>(1, std::count_if(matched.data.begin(), end, [](int64_t m) { return m >= 0; })));
}

// loc_head, targets.loc, match.*, loss.cls_per_prior, mining.negatives -> loss.loc, loss.conf, loss.total
template <typename T>
void Model<T>::loss_sums_stage() {
  const Tensor<T>& loc = taps_.at("loc_head");
  const Tensor<T>& target_loc = taps_.at("targets.loc");
  const Tensor<T>& cls_loss = taps_.at("loss.cls_per_prior");
  const Tensor<int64_t>& matched = index_taps_.at("match.matched_idx");
  const Tensor<int64_t>& cls_target = index_taps_.at("match.labels");
  const Tensor<int64_t>& negatives = index_taps_.at("mining.negatives");
  const int64_t B = matched.dim(0), P = matched.dim(1);
  // Summed per image, then over images, as torchvision's per-image smooth_l1_loss(reduction="sum") and sum().
  // Deliberate: the sums run in double and are rounded once. A float sum taken in order over thousands of
  // per-prior losses (B*P of them) measured 93x the reference's error against float64 (torch sums pairwise).
  double box_sum = 0;
  for (int64_t b = 0; b < B; ++b) {
    double image_sum = 0;
    for (int64_t i = b * P; i < (b + 1) * P; ++i)
      if (matched.ptr()[i] >= 0)
        for (int j = 0; j < 4; ++j) image_sum += smooth_l1(loc.ptr()[4 * i + j] - target_loc.ptr()[4 * i + j]);
    box_sum += image_sum;
  }
  double cls_sum_fg = 0, cls_sum_neg = 0;
  for (int64_t i = 0; i < B * P; ++i) {
    if (cls_target.ptr()[i] > 0) cls_sum_fg += cls_loss.ptr()[i];
    if (negatives.ptr()[i]) cls_sum_neg += cls_loss.ptr()[i];
  }
  if (fault_on(Fault::LossSumFloatInOrder)) {  // one float sum each, in prior order: within float32's error model
    T box = 0, fg = 0, neg = 0;
    for (int64_t i = 0; i < B * P; ++i) {
      if (matched.ptr()[i] >= 0)
        for (int j = 0; j < 4; ++j) box += smooth_l1(loc.ptr()[4 * i + j] - target_loc.ptr()[4 * i + j]);
      if (cls_target.ptr()[i] > 0) fg += cls_loss.ptr()[i];
      if (negatives.ptr()[i]) neg += cls_loss.ptr()[i];
    }
    box_sum = box, cls_sum_fg = fg, cls_sum_neg = neg;
  }
  const T normalizer = loss_normalizer();
  const T loss_loc = T(box_sum) / normalizer, loss_conf = T(cls_sum_fg + cls_sum_neg) / normalizer;
  record("loss.loc", Tensor<T>({}, loss_loc));
  record("loss.conf", Tensor<T>({}, loss_conf));
  record("loss.total", Tensor<T>({}, loss_loc + loss_conf));
}

template <typename T>
void Model<T>::loss(const std::vector<Tensor<T>>& boxes, const std::vector<std::vector<int64_t>>& labels,
                    const StepRouting::Mining* forced_negatives) {
  match_stage(boxes, labels);
  class_loss_stage();
  mining_stage();
  if (forced_negatives != nullptr) {
    Tensor<int64_t>& negatives = index_taps_.at("mining.negatives");
    for (int64_t i = 0; i < negatives.numel(); ++i)
      if (forced_negatives->mask.data[i]) negatives.data[i] = forced_negatives->negatives.data[i] != 0;
  }
  loss_sums_stage();
}

}  // namespace ssd
