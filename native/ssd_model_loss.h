// Model<T>::loss: torchvision's SSD.compute_loss on the recorded head outputs, with every intermediate kept.
#pragma once

namespace ssd {

template <typename T>
void Model<T>::loss(const std::vector<Tensor<T>>& boxes, const std::vector<std::vector<int64_t>>& labels) {
  const Tensor<T>& loc = taps_.at("loc_head");
  const Tensor<T>& conf = taps_.at("conf_head");
  const Tensor<T>& priors = taps_.at("priors");
  const int B = int(loc.dim(0)), K = num_classes_;
  const int64_t P = priors.dim(0);

  Tensor<int64_t> matched({B, P}, -1), cls_target({B, P}), negatives({B, P});
  Tensor<T> target_loc({B, P, 4}), cls_loss({B, P});
  std::vector<T> box_loss_per_image(B, T(0)), iou;
  std::vector<uint8_t> foreground(P), mined(P);
  num_foreground_ = 0;

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
      if (match[p] >= 0) {
        ++num_foreground_;
        T* t = target_loc.ptr() + 4 * i;
        encode_box(t, boxes[b].ptr() + 4 * match[p], priors.ptr() + 4 * p);
        for (int j = 0; j < 4; ++j) box_loss_per_image[b] += smooth_l1(loc.ptr()[4 * i + j] - t[j]);
      }
      cls_loss.ptr()[i] = cross_entropy(conf.ptr() + i * K, K, cls_target.ptr()[i]);
      // Mining and the classification sum use label > 0, not matched >= 0 (a GT labelled 0 is background here).
      foreground[p] = cls_target.ptr()[i] > 0;
    }
    mine_hard_negatives(mined.data(), cls_loss.ptr() + b * P, foreground.data(), P);
    for (int64_t p = 0; p < P; ++p) negatives.ptr()[b * P + p] = mined[p];
  }

  const T normalizer = T(std::max<int64_t>(1, num_foreground_));
  T box_sum = 0, cls_sum_fg = 0, cls_sum_neg = 0;
  for (int b = 0; b < B; ++b) box_sum += box_loss_per_image[b];
  for (int64_t i = 0; i < int64_t(B) * P; ++i) {
    if (cls_target.ptr()[i] > 0) cls_sum_fg += cls_loss.ptr()[i];
    if (negatives.ptr()[i]) cls_sum_neg += cls_loss.ptr()[i];
  }
  const T loss_loc = box_sum / normalizer, loss_conf = (cls_sum_fg + cls_sum_neg) / normalizer;

  record_index("match.matched_idx", std::move(matched));
  record_index("match.labels", std::move(cls_target));
  record("targets.loc", std::move(target_loc));
  record("loss.cls_per_prior", std::move(cls_loss));
  record_index("mining.negatives", std::move(negatives));
  record("loss.loc", Tensor<T>({}, loss_loc));
  record("loss.conf", Tensor<T>({}, loss_conf));
  record("loss.total", Tensor<T>({}, loss_loc + loss_conf));
}

}  // namespace ssd
