# The pipeline's libraries (one per src/ folder) and the umbrella target `qattn_all` that the CLI
# and the tests link. Dependencies: support <- spec <- tl <- hw <- plan.
# A folder with no sources yet is skipped.
function(qattn_stage name)
  file(GLOB _srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/${name}/*.cc)
  if(_srcs)
    qattn_library(qattn_${name} ${name} ${ARGN})
  endif()
endfunction()

qattn_stage(spec qattn_support nlohmann_json::nlohmann_json)
if(TARGET qattn_spec)
  target_link_libraries(qattn_tl PUBLIC qattn_spec)
endif()
qattn_stage(hw qattn_tl qattn_support)
include(${CMAKE_SOURCE_DIR}/cmake/embed.cmake)  # data/gpus.json -> qattn_hw, links ${CMAKE_DL_LIBS}
qattn_stage(plan qattn_tl qattn_support)
set(QATTN_STAGE_LIBS qattn_tl qattn_support)
foreach(lib qattn_plan qattn_hw qattn_spec)
  if(TARGET ${lib})
    list(PREPEND QATTN_STAGE_LIBS ${lib})
  endif()
endforeach()
if(TARGET qattn_plan AND TARGET qattn_hw)
  target_link_libraries(qattn_plan PUBLIC qattn_hw)
endif()
add_library(qattn_all INTERFACE)
target_link_libraries(qattn_all INTERFACE ${QATTN_STAGE_LIBS})
